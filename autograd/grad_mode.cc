#include "zeroshard/autograd/grad_mode.h"

namespace zeroshard::autograd {

namespace {
thread_local bool grad_enabled = true;
}  // namespace

bool GradMode::IsEnabled() { return grad_enabled; }
void GradMode::SetEnabled(bool enabled) { grad_enabled = enabled; }

}  // namespace zeroshard::autograd
