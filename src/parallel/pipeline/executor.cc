#include "parallel/pipeline/executor.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "core/error.h"
#include "core/phase.h"
#include "core/timer.h"
#include "core/trace.h"

namespace strata::parallel::pipeline {

std::vector<int> slots_for(const Schedule& s, int stage) {
  std::vector<int> out;
  for (int c = 0; c < s.virt; ++c) out.push_back(std::max(1, chunk_slots(s, stage, c)));
  return out;
}

Executor::Executor(Schedule schedule, int stage, comm::ProcessGroup* act, comm::ProcessGroup* grad)
    : s_(std::move(schedule)), stage_(stage), act_(act), grad_(grad) {
  STRATA_CHECK(stage >= 0 && stage < s_.stages, "pipeline: stage ", stage, " outside the ",
               s_.stages, " stages of the schedule");
  if (s_.stages > 1) {
    STRATA_CHECK(act && grad && act->size() == s_.stages && grad->size() == s_.stages,
                 "pipeline: the schedule has ", s_.stages, " stages but the pp groups have ",
                 act ? act->size() : 0, " ranks");
    STRATA_CHECK(act->rank() == stage && grad->rank() == stage, "pipeline: rank ", act->rank(),
                 " of the pp group runs stage ", stage);
  }
}

namespace {

// The stage's RECVs of one channel in schedule order, posted ahead of their consumers into
// staging buffers: each as soon as a buffer is free and every earlier RECV of the channel is
// posted (per peer, messages arrive in send order).
struct RecvQueue {
  comm::ProcessGroup* group = nullptr;
  std::vector<const Action*> order;  // this channel's RECVs, in schedule order
  size_t next = 0;                   // the next one to post
  std::vector<float*> free;          // staging buffers not holding a pending or unread message
  std::map<std::pair<int, int>, std::pair<comm::WorkPtr, float*>> posted;  // (chunk, micro)
};

// The flight recorder copies the current phase into each operation it records. A stage's
// sends and receives (receives are posted ahead of their use) and its computes are marked
// with the pass they belong to, so a hang report says "recv ... from forward (step 4)"; a
// forward-only schedule run for eval keeps the eval phase.
class ActionPhase {
 public:
  explicit ActionPhase(Op op) : prev_(current_phase().get()) {
    if (prev_.kind == PhaseKind::eval) return;
    const bool fwd = op == Op::F || op == Op::recv_act || op == Op::send_act;
    current_phase().set(prev_.step, -1, fwd ? PhaseKind::forward : PhaseKind::backward);
  }
  ~ActionPhase() { current_phase().set(prev_.step, prev_.layer, prev_.kind); }
  ActionPhase(const ActionPhase&) = delete;
  ActionPhase& operator=(const ActionPhase&) = delete;

 private:
  const PhaseSnapshot prev_;
};

}  // namespace

double Executor::run(model::StageModel& m, float scale) {
  STRATA_CHECK(m.num_inputs() == s_.micro, "pipeline: the schedule has ", s_.micro,
               " micro-batches but the stage got ", m.num_inputs());
  const std::vector<int> slots = slots_for(s_, stage_);
  using Key = std::tuple<int, int, int>;  // (op, chunk, micro)
  std::map<Key, comm::WorkPtr> sends;
  int64_t max_floats = 0;
  for (int mb = 0; mb < s_.micro; ++mb) max_floats = std::max(max_floats, m.message_floats(mb));
  RecvQueue q[2];  // activations, gradients
  q[0].group = act_;
  q[1].group = grad_;
  for (const Action& a : s_.actions[size_t(stage_)])
    if (a.op == Op::recv_act || a.op == Op::recv_grad) q[a.op == Op::recv_act ? 0 : 1].order.push_back(&a);
  const size_t depth = kRecvDepth;
  if (staging_.size() < 2 * depth * size_t(max_floats)) staging_.resize(2 * depth * size_t(max_floats));
  for (RecvQueue& r : q) {
    const size_t n = std::min(depth, r.order.size());
    for (size_t i = 0; i < n; ++i)
      r.free.push_back(staging_.data() + size_t((&r - q) * depth + i) * size_t(max_floats));
  }
  auto post = [&](RecvQueue& r) {
    while (r.next < r.order.size() && !r.free.empty()) {
      const Action& a = *r.order[r.next++];
      float* buf = r.free.back();
      r.free.pop_back();
      const ActionPhase phase(a.op);
      r.posted[{a.chunk, a.micro}] = {
          r.group->recv_async(buf, size_t(m.message_floats(a.micro)), DType::f32, a.peer,
                              message_tag(s_, stage_, a)),
          buf};
    }
  };
  int64_t busy = 0, waited = 0, send_waited = 0, copied = 0;
  // The message of RECV `a`: waits for it, copies it into the slot, frees the staging buffer.
  msgs_.sent_ns.assign(2 * size_t(s_.virtual_stages() * s_.micro), -1);
  msgs_.waits.clear();
  auto take = [&](RecvQueue& r, const Action& a, float* dst) {
    auto it = r.posted.find({a.chunk, a.micro});
    STRATA_CHECK(it != r.posted.end(), "pipeline: stage ", stage_, " consumes micro-batch ",
                 a.micro, " chunk ", a.chunk, " before its receive was posted");
    const int64_t w0 = now_ns();
    it->second.first->wait();
    const int64_t w1 = now_ns();
    msgs_.waits.push_back({&r == q ? 0 : 1, message_tag(s_, stage_, a), a.peer, w0, w1});
    std::memcpy(dst, it->second.second, sizeof(float) * size_t(m.message_floats(a.micro)));
    waited += w1 - w0;
    copied += now_ns() - w1;
    r.free.push_back(it->second.second);
    r.posted.erase(it);
    post(r);
  };
  auto wait_send = [&](const Key& k) {
    auto it = sends.find(k);
    if (it == sends.end()) return;
    const int64_t w0 = now_ns();
    it->second->wait();
    send_waited += now_ns() - w0;
    sends.erase(it);
  };
  const int64_t t0 = now_ns();
  post(q[0]);
  post(q[1]);
  double loss = 0;
  const bool trace = tracer().enabled();
  for (const Action& a : s_.actions[size_t(stage_)]) {
    const int tag = message_tag(s_, stage_, a);
    const Key key{int(a.op), a.chunk, a.micro};
    const size_t n = is_compute(a.op) ? 0 : size_t(m.message_floats(a.micro));
    const ActionPhase phase(a.op);
    switch (a.op) {
      case Op::recv_act:
        take(q[0], a, m.input(a.chunk, a.micro));
        continue;
      case Op::recv_grad:
        take(q[1], a, m.grad_input(a.chunk, a.micro));
        continue;
      case Op::send_act:
        msgs_.sent_ns[message_index(s_, 0, tag)] = now_ns();
        sends[key] = act_->send_async(m.output(a.chunk, a.micro), n, DType::f32, a.peer, tag);
        continue;
      case Op::send_grad:
        msgs_.sent_ns[message_index(s_, 1, tag)] = now_ns();
        sends[key] = grad_->send_async(m.grad_output(a.chunk, a.micro), n, DType::f32, a.peer, tag);
        continue;
      default:
        break;
    }
    // A compute: the slot it overwrites is no longer being sent (its input was taken above).
    const int reuse = a.micro - slots[size_t(a.chunk)];
    if (a.op == Op::F) wait_send(Key{int(Op::send_act), a.chunk, reuse});
    if (a.op == Op::B) wait_send(Key{int(Op::send_grad), a.chunk, reuse});
    const int64_t c0 = now_ns();
    {
      TraceSpan span(tracer(),
                     trace ? cat(op_name(a.op), a.micro, s_.virt > 1 ? cat(" chunk ", a.chunk) : "")
                           : std::string(),
                     "pipeline");
      if (a.op == Op::F)
        loss += m.forward(a.chunk, a.micro);
      else if (a.op == Op::W)
        m.backward_weight(a.chunk, a.micro);
      else if (s_.split_backward)
        m.backward_input(a.chunk, a.micro, scale);
      else
        m.backward(a.chunk, a.micro, scale);
    }
    busy += now_ns() - c0;
  }
  const int64_t d0 = now_ns();
  for (auto& [k, w] : sends) w->wait();
  send_waited += now_ns() - d0;
  last_.step_s = double(now_ns() - t0) * 1e-9;
  last_.busy_s = double(busy) * 1e-9;
  last_.recv_wait_s = double(waited) * 1e-9;
  last_.send_wait_s = double(send_waited) * 1e-9;
  last_.copy_s = double(copied) * 1e-9;
  return loss;
}

WaitSplit split_waits(const Schedule& s, const MessageTimes& mine,
                      const std::vector<int64_t>& sent_ns) {
  const size_t per_stage = 2 * size_t(s.virtual_stages() * s.micro);
  STRATA_CHECK(sent_ns.size() == per_stage * size_t(s.stages), "pipeline: ", sent_ns.size(),
               " send times for ", s.stages, " stages of ", per_stage, " messages");
  WaitSplit out;
  for (const MessageTimes::Wait& w : mine.waits) {
    const int64_t sent = sent_ns[size_t(w.peer) * per_stage + message_index(s, w.channel, w.tag)];
    const int64_t split = std::clamp(sent, w.begin_ns, w.end_ns);
    out.peer_s += double(split - w.begin_ns) * 1e-9;
    out.transfer_s += double(w.end_ns - split) * 1e-9;
  }
  return out;
}

}  // namespace strata::parallel::pipeline
