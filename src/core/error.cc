#include "core/error.h"

#include <cstdarg>
#include <cstdio>

namespace strata {

std::string fmt(const char* format, ...) {
  char buf[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

std::string SettingError::render(const std::string& marked, const std::string& prefix) {
  std::string out;
  out.reserve(marked.size() + 16);
  for (char c : marked) {
    if (c == '\x01')
      out += prefix;
    else if (c != '\x02')
      out += c;
  }
  return out;
}

}  // namespace strata
