// Grad mode: whether ops record the graph on this thread.
//
//   {
//     NoGradGuard no_grad;        // evaluation, optimizer updates, recomputation setup
//     ZS_ASSIGN_OR_RETURN(Variable y, model(x));           // records nothing
//   }
//
// Per thread, so in-process ranks (one thread each) do not affect each other.
#ifndef ZEROSHARD_AUTOGRAD_GRAD_MODE_H_
#define ZEROSHARD_AUTOGRAD_GRAD_MODE_H_

namespace zeroshard::autograd {

class GradMode {
 public:
  static bool IsEnabled();
  static void SetEnabled(bool enabled);
};

// Disables recording until destroyed, then restores the previous mode.
class NoGradGuard {
 public:
  NoGradGuard() : previous_(GradMode::IsEnabled()) { GradMode::SetEnabled(false); }
  ~NoGradGuard() { GradMode::SetEnabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Enables recording (inside a NoGradGuard) until destroyed.
class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(GradMode::IsEnabled()) { GradMode::SetEnabled(true); }
  ~EnableGradGuard() { GradMode::SetEnabled(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace zeroshard::autograd

#endif  // ZEROSHARD_AUTOGRAD_GRAD_MODE_H_
