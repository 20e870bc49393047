#include "cli/flags/data.h"

#include "cli/command.h"

namespace strata::cli {

void DataFlags::add_to(CLI::App& app, const Only& only) {
  FamilyScope family(app, "Data", "data", only);
  app.add_option("--data", data, "synthetic | FILE.txt | FILE.bin | DIR (llm.c shards)")
      ->check(plain_path(true))
      ->capture_default_str();
  app.add_option("--tail", tail, "Incomplete last global batch of an epoch: drop, pad or uneven")
      ->capture_default_str();
  app.add_flag("--doc-mask", doc_mask,
               "Documents packed into a sequence: attention does not cross them and positions restart "
               "at each (the document token comes from a prepared --data DIR, or --doc-token)");
  app.add_option("--doc-token", doc_token,
                 "With --doc-mask: the token id every document begins with (default: the prepared "
                 "data's document token)")
      ->check(CLI::NonNegativeNumber);
}

}  // namespace strata::cli
