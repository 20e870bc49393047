// Barrier: every rank publishes its descriptor and waits for all the others (the "open"
// step every collective starts with). Cost: α (P-1 counters read per rank).
#include "comm/shm/shm_transport.h"

namespace strata::comm::shm {

void barrier_run(OpCtx& c) { c.open(); }

}  // namespace strata::comm::shm
