#include "distributed/grad_sync.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <chrono>
#include <mutex>

#include "common/torch_compat.h"
#include "distributed/dist.h"

// Shapes: a bucket is one flat [elements] tensor of the gradients it holds.
namespace thx::dist {

using Clock = std::chrono::steady_clock;

// When each bucket was launched and when its all-reduce completed.
struct GradSync::Timeline {
  std::mutex mutex;
  std::vector<std::pair<Clock::time_point, Clock::time_point>> spans;
  int64_t bytes = 0;
};

namespace {

// Sum the bucket over the ranks (DDP's built-in hook divides by the world size; the loop has
// already weighted each rank's loss by its share of the step).
class SumHook : public c10d::CommHookInterface {
 public:
  SumHook(c10::intrusive_ptr<c10d::ProcessGroup> pg, std::shared_ptr<GradSync::Timeline> t)
      : pg_(std::move(pg)), timeline_(std::move(t)) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    std::vector<at::Tensor> tensors{bucket.getBufferRef()};
    const auto launched = Clock::now();
    size_t slot;
    {
      std::lock_guard<std::mutex> lock(timeline_->mutex);
      slot = timeline_->spans.size();
      timeline_->spans.push_back({launched, launched});
      timeline_->bytes += int64_t(tensors[0].numel() * tensors[0].element_size());
    }
    auto future = pg_->allreduce(tensors)->getFuture();
    auto timeline = timeline_;
    future->addCallback([timeline, slot](c10::ivalue::Future&) {
      std::lock_guard<std::mutex> lock(timeline->mutex);
      timeline->spans[slot].second = Clock::now();
    });
    return future;
  }

  at::Tensor parseHookResult(const c10::IValue& result) override {
    if (result.isTensor()) return result.toTensor();
    return result.toTensorVector()[0];
  }

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> pg_;
  std::shared_ptr<GradSync::Timeline> timeline_;
};

Clock::time_point g_prepared;

}  // namespace

struct GradSync::Impl {
  std::unique_ptr<c10d::Reducer> reducer;
};

GradSync::GradSync() : timeline_(std::make_shared<Timeline>()) {}

GradSync::GradSync(const std::vector<torch::Tensor>& params, bool find_unused, int64_t bucket_bytes) : GradSync() {
  if (active()) start(params, find_unused, bucket_bytes, &group());
}

void GradSync::start(const std::vector<torch::Tensor>& params, bool find_unused, int64_t bucket_bytes,
                     c10d::ProcessGroup* group) {
  // As DDP: buckets filled in reverse order of the parameters (the order backward reaches
  // them), a small first bucket so that communication starts early.
  const size_t first_bucket = 1 << 20;
  auto [indices, limits] = c10d::compute_bucket_assignment_by_size(
      params, {first_bucket, size_t(bucket_bytes)}, std::vector<bool>(params.size(), false));
  std::reverse(indices.begin(), indices.end());
  std::reverse(limits.begin(), limits.end());
  c10::intrusive_ptr<c10d::ProcessGroup> pg = c10::intrusive_ptr<c10d::ProcessGroup>::reclaim_copy(group);
  impl_ = std::make_unique<Impl>();
  impl_->reducer = compat::make_reducer(params, indices, limits, pg, bucket_bytes, find_unused, int64_t(first_bucket));
  impl_->reducer->register_comm_hook(std::make_unique<SumHook>(pg, timeline_));
}

std::unique_ptr<GradSync> GradSync::on_own_group(const std::vector<torch::Tensor>& params, int64_t bucket_bytes) {
  const auto timeout = std::chrono::milliseconds(60000);
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
  compat::GroupPtr pg =
      compat::make_gloo_group(store, 0, 1, timeout, c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  std::unique_ptr<GradSync> sync(new GradSync());
  sync->start(params, false, bucket_bytes, pg.get());  // (the Reducer holds the group, the group its store)
  return sync;
}

GradSync::~GradSync() = default;

void GradSync::prepare(const torch::Tensor& loss) {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(timeline_->mutex);
    timeline_->spans.clear();
    timeline_->bytes = 0;
  }
  g_prepared = Clock::now();
  impl_->reducer->prepare_for_backward({loss});
}

void GradSync::finish() {
  if (!impl_) return;
  const auto end = Clock::now();
  std::lock_guard<std::mutex> lock(timeline_->mutex);
  auto& spans = timeline_->spans;
  std::sort(spans.begin(), spans.end());
  SyncStats s;
  s.buckets = int64_t(spans.size());
  s.bytes = timeline_->bytes;
  s.backward_s = std::chrono::duration<double>(end - g_prepared).count();
  // The union of the in-flight intervals, and its part after the last launch.
  Clock::time_point cur_start{}, cur_end{};
  const Clock::time_point last_launch = spans.empty() ? end : spans.back().first;
  auto add = [&](Clock::time_point a, Clock::time_point b) {
    s.comm_s += std::chrono::duration<double>(b - a).count();
    if (b > last_launch) s.exposed_s += std::chrono::duration<double>(b - std::max(a, last_launch)).count();
  };
  for (const auto& [a, b] : spans) {
    if (cur_end == Clock::time_point{} || a > cur_end) {
      if (cur_end != Clock::time_point{}) add(cur_start, cur_end);
      cur_start = a, cur_end = b;
    } else {
      cur_end = std::max(cur_end, b);
    }
  }
  if (cur_end != Clock::time_point{}) add(cur_start, cur_end);
  stats_ = s;
}

}  // namespace thx::dist
