#include "parallel/pipeline/executor.h"

#include <map>
#include <tuple>

#include "core/error.h"
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

double Executor::run(model::StageModel& m, float scale) {
  STRATA_CHECK(m.num_inputs() == s_.micro, "pipeline: the schedule has ", s_.micro,
               " micro-batches but the stage got ", m.num_inputs());
  const std::vector<int> slots = slots_for(s_, stage_);
  using Key = std::tuple<int, int, int>;  // (op, chunk, micro)
  std::map<Key, comm::WorkPtr> recvs, sends;
  int64_t busy = 0, waited = 0;
  auto wait = [&waited](std::map<Key, comm::WorkPtr>& works, const Key& k) {
    auto it = works.find(k);
    if (it == works.end()) return;
    const int64_t w0 = now_ns();
    it->second->wait();
    waited += now_ns() - w0;
    works.erase(it);
  };
  const int64_t t0 = now_ns();
  double loss = 0;
  const bool trace = tracer().enabled();
  for (const Action& a : s_.actions[size_t(stage_)]) {
    const int tag = message_tag(s_, stage_, a);
    const Key key{int(a.op), a.chunk, a.micro};
    const size_t n = is_compute(a.op) ? 0 : size_t(m.message_floats(a.micro));
    switch (a.op) {
      case Op::recv_act:
        recvs[key] = act_->recv_async(m.input(a.chunk, a.micro), n, DType::f32, a.peer, tag);
        continue;
      case Op::recv_grad:
        recvs[key] = grad_->recv_async(m.grad_input(a.chunk, a.micro), n, DType::f32, a.peer, tag);
        continue;
      case Op::send_act:
        sends[key] = act_->send_async(m.output(a.chunk, a.micro), n, DType::f32, a.peer, tag);
        continue;
      case Op::send_grad:
        sends[key] = grad_->send_async(m.grad_output(a.chunk, a.micro), n, DType::f32, a.peer, tag);
        continue;
      default:
        break;
    }
    // A compute: its input arrived, and the slot it overwrites is no longer being sent.
    const int reuse = a.micro - slots[size_t(a.chunk)];
    if (a.op == Op::F) {
      wait(recvs, Key{int(Op::recv_act), a.chunk, a.micro});
      wait(sends, Key{int(Op::send_act), a.chunk, reuse});
    } else if (a.op == Op::B) {
      wait(recvs, Key{int(Op::recv_grad), a.chunk, a.micro});
      wait(sends, Key{int(Op::send_grad), a.chunk, reuse});
    }
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
  for (auto& [k, w] : recvs) w->wait();
  for (auto& [k, w] : sends) w->wait();
  last_.step_s = double(now_ns() - t0) * 1e-9;
  last_.busy_s = double(busy) * 1e-9;
  last_.recv_wait_s = double(waited) * 1e-9;
  return loss;
}

}  // namespace strata::parallel::pipeline
