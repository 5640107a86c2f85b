#include "worker/train/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace ablate::train {
namespace {

// LibTorch 2.4 deprecates the per-backend functions (is_enabled, set_autocast_gpu_dtype, ...) in
// favour of ones that take the device type; this is the one place that knows both.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool IsEnabled(c10::DeviceType type) { return at::autocast::is_autocast_enabled(type); }
void SetEnabled(c10::DeviceType type, bool on) { at::autocast::set_autocast_enabled(type, on); }
at::ScalarType Dtype(c10::DeviceType type) { return at::autocast::get_autocast_dtype(type); }
void SetDtype(c10::DeviceType type, at::ScalarType dtype) {
  at::autocast::set_autocast_dtype(type, dtype);
}
#else
bool IsEnabled(c10::DeviceType type) {
  return type == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
void SetEnabled(c10::DeviceType type, bool on) {
  if (type == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(on);
  } else {
    at::autocast::set_enabled(on);
  }
}
at::ScalarType Dtype(c10::DeviceType type) {
  return type == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                      : at::autocast::get_autocast_gpu_dtype();
}
void SetDtype(c10::DeviceType type, at::ScalarType dtype) {
  if (type == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
}
#endif

}  // namespace

ScopedAutocast::ScopedAutocast(const torch::Device& device, bool enable)
    : type_(device.type()), enabled_(enable) {
  if (!enabled_) return;
  TORCH_CHECK(device.is_cpu() || device.is_cuda(), "bf16 autocast needs a CPU or CUDA device, not ",
              device.str());
  previous_enabled_ = IsEnabled(type_);
  previous_dtype_ = Dtype(type_);
  SetDtype(type_, at::kBFloat16);
  SetEnabled(type_, true);
}

ScopedAutocast::~ScopedAutocast() {
  if (!enabled_) return;
  at::autocast::clear_cache();
  SetEnabled(type_, previous_enabled_);
  SetDtype(type_, previous_dtype_);
}

}  // namespace ablate::train
