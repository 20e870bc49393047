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

}  // namespace strata
