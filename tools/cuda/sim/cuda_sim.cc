// The fiber scheduler behind cuda_sim.h. One launch at a time (a process-wide
// mutex): blocks run one after another, the threads of a block as fibers on
// the launching thread, switched at barriers and warp-collective calls
// (shuffles, __syncwarp, wmma). On x86-64 a fiber
// switch is a few instructions (ZsSimSwitch below: callee-saved registers,
// MXCSR and the x87 control word); elsewhere ucontext, whose swapcontext makes
// a system call per switch.
#include "zeroshard/tools/cuda/sim/cuda_sim.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <vector>

namespace zs_cuda_sim {

namespace {

constexpr int kWarpSize = 32;
constexpr int kMaxThreads = 1024;
constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kStaticSharedLimit = 48 * 1024;

enum class State { kRunnable, kAtBlockBarrier, kAtWarp, kDone };

#if defined(__x86_64__)
// Saves the callee-saved registers, MXCSR and the x87 control word on the
// current stack, stores the stack pointer in *save and continues on `load`'s.
extern "C" void ZsSimSwitch(void** save, void* load);
asm(R"(
  .text
  .p2align 4
  .globl ZsSimSwitch
  .type ZsSimSwitch, @function
ZsSimSwitch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  fldcw (%rsp)
  ldmxcsr 8(%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ZsSimSwitch, .-ZsSimSwitch
  .section .note.GNU-stack,"",@progbits
  .text
)");

struct Context {
  void* sp = nullptr;
};

// A stack whose first switch "returns" into entry() with the ABI's alignment.
void MakeContext(Context* c, char* stack, size_t bytes, void (*entry)()) {
  uintptr_t top = reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t{15};
  auto* frame = reinterpret_cast<uint64_t*>(top - 80);  // 16 B control words, 6 registers, ret
  std::memset(frame, 0, 80);
  const uint32_t mxcsr = _mm_getcsr();
  const uint16_t fpucw = 0x037F;
  std::memcpy(reinterpret_cast<char*>(frame), &fpucw, sizeof(fpucw));
  std::memcpy(reinterpret_cast<char*>(frame) + 8, &mxcsr, sizeof(mxcsr));
  frame[8] = reinterpret_cast<uint64_t>(entry);  // after 16 B + 6 registers
  c->sp = frame;
}

void SwitchTo(Context* from, Context* to) { ZsSimSwitch(&from->sp, to->sp); }
#else
struct Context {
  ucontext_t uc;
};

void MakeContext(Context* c, char* stack, size_t bytes, void (*entry)()) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = bytes;
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, entry, 0);
}

void SwitchTo(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }
#endif

struct Fiber {
  Context context;
  ThreadVars vars;
  State state = State::kRunnable;
  // At a warp-collective call (kAtWarp): its mask and which call it is.
  unsigned warp_mask = 0;
  WarpCall call{"", nullptr, 0, false};
  // A shuffle's exchange: the value this lane offers, the lane it takes from
  // (-1: no exchange) and what it got. The result is copied when the warp
  // opens (OpenWarpGroup), while every lane of the mask still waits with the
  // value it offered, so no lane's next offer can overwrite one not yet read.
  uint64_t offered = 0;
  int take_from = -1;
  uint64_t taken = 0;
};

// Fiber stacks, kept across launches; the lowest page of each is a guard.
class StackPool {
 public:
  ~StackPool() {
    for (char* s : stacks_) munmap(s, kStackBytes);
  }
  char* Get(size_t i) {
    while (stacks_.size() <= i) {
      void* p = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
      if (p == MAP_FAILED) return nullptr;
      mprotect(p, static_cast<size_t>(sysconf(_SC_PAGESIZE)), PROT_NONE);
      stacks_.push_back(static_cast<char*>(p));
    }
    return stacks_[i];
  }

 private:
  std::vector<char*> stacks_;
};

struct Sim {
  std::mutex launch_mu;  // one launch at a time
  std::mutex mu;         // settings and statistics
  Order order = Order::kForward;
  int64_t max_shared_optin = 232448;
  std::map<const void*, int> max_dynamic_shared;  // per kernel, set by cudaFuncSetAttribute
  Stats stats;
  std::string last_error_message;
  int pending_error = 0;  // returned by the next cudaGetLastError
  StackPool stacks;
};

Sim& Global() {
  static Sim* sim = new Sim();
  return *sim;
}

// The block being run (touched only by the launching thread and its fibers).
struct BlockRun {
  std::vector<Fiber> fibers;
  Context scheduler;
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  std::vector<char> dynamic_shared;
  std::string error;
  std::string fault;  // a device fault (Fault, CheckAligned): the first one
  int fault_code = 0;
};

thread_local BlockRun* tl_run = nullptr;

[[noreturn]] void FiberMain() {
  BlockRun* run = tl_run;
  (*run->body)();
  run->current->state = State::kDone;
  SwitchTo(&run->current->context, &run->scheduler);
  __builtin_unreachable();
}

void Yield() {
  BlockRun* run = tl_run;
  SwitchTo(&run->current->context, &run->scheduler);
}

std::string ThreadName(const Fiber& f) {
  std::ostringstream s;
  s << "thread (" << f.vars.thread_idx.x << "," << f.vars.thread_idx.y << "," << f.vars.thread_idx.z
    << ")";
  return s.str();
}

std::string BlockName(const uint3& b) {
  std::ostringstream s;
  s << "block (" << b.x << "," << b.y << "," << b.z << ")";
  return s.str();
}

std::string Hex(unsigned mask) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", mask);
  return buf;
}

bool SameCall(const WarpCall& a, const WarpCall& b) {
  if (std::strcmp(a.name, b.name) != 0) return false;
  if (a.file == nullptr || b.file == nullptr) return a.file == b.file;
  return a.line == b.line && std::strcmp(a.file, b.file) == 0;
}

// "wmma::mma_sync (file.cc:12, mask 0xffffffff)"
std::string CallName(const Fiber& f) {
  std::string s = std::string(f.call.name) + " (";
  if (f.call.file != nullptr)
    s += std::string(f.call.file) + ":" + std::to_string(f.call.line) + ", ";
  return s + "mask " + Hex(f.warp_mask) + ")";
}

// The warp-collective call of `first` (at kAtWarp) opens when every lane of its
// mask is at the same call with the same mask (exited lanes count as arrived
// where the call allows it: __syncwarp). Returns whether it opened; sets
// run.error for what can never open (a lane that is not there or has exited,
// a mask without the caller's own lane).
bool OpenWarpGroup(BlockRun& run, int w0, Fiber& first, Stats& stats) {
  const int n = static_cast<int>(run.fibers.size());
  const unsigned mask = first.warp_mask;
  const int own_lane = static_cast<int>(&first - run.fibers.data()) - w0;
  if (!(mask & (1u << own_lane))) {
    run.error = CallName(first) + " by " + ThreadName(first) +
                ": the mask must name the calling lane (" + std::to_string(own_lane) + ")";
    return false;
  }
  bool ready = true;
  for (int lane = 0; lane < kWarpSize; ++lane) {
    if (!(mask & (1u << lane))) continue;
    const int i = w0 + lane;
    if (i >= n) {
      run.error = CallName(first) + " by " + ThreadName(first) + " names lane " +
                  std::to_string(lane) + " of warp " + std::to_string(w0 / kWarpSize) +
                  ", which this block (" + std::to_string(n) + " threads) does not have" +
                  (first.call.file != nullptr ? " (wmma needs the whole warp)" : "");
      return false;
    }
    const Fiber& f = run.fibers[i];
    if (f.state == State::kDone) {
      if (first.call.exited_lanes_arrive) continue;
      run.error = CallName(first) + " by " + ThreadName(first) + " waits for " + ThreadName(f) +
                  ", which has exited";
      return false;
    }
    if (f.state != State::kAtWarp || f.warp_mask != mask || !SameCall(f.call, first.call)) {
      ready = false;
    }
  }
  if (!ready) return false;
  for (int lane = 0; lane < kWarpSize; ++lane) {
    if (!(mask & (1u << lane)) || run.fibers[w0 + lane].state != State::kAtWarp) continue;
    Fiber& f = run.fibers[w0 + lane];
    // Lanes outside the mask give undefined values on the device, here the
    // taker's own.
    const int from = f.take_from;
    if (from >= 0) {
      f.taken = (from < kWarpSize && (mask & (1u << from)) && w0 + from < n)
                    ? run.fibers[w0 + from].offered
                    : f.offered;
    }
    f.state = State::kRunnable;
  }
  if (first.take_from >= 0) {
    ++stats.shuffles;
  } else {
    ++stats.warp_syncs;
  }
  return true;
}

// Why the lanes waiting at warp-collective calls can never go on (called when
// nothing else can run): the first mismatch in the first waiting lane's mask.
std::string WarpDeadlock(BlockRun& run) {
  const int n = static_cast<int>(run.fibers.size());
  for (int i = 0; i < n; ++i) {
    const Fiber& first = run.fibers[i];
    if (first.state != State::kAtWarp) continue;
    const int w0 = i / kWarpSize * kWarpSize;
    for (int lane = 0; lane < kWarpSize; ++lane) {
      if (!(first.warp_mask & (1u << lane)) || w0 + lane >= n) continue;
      const Fiber& f = run.fibers[w0 + lane];
      if (f.state == State::kAtBlockBarrier) {
        return CallName(first) + " by " + ThreadName(first) + " waits for " + ThreadName(f) +
               ", which waits at __syncthreads()";
      }
      if (f.state == State::kAtWarp &&
          (f.warp_mask != first.warp_mask || !SameCall(f.call, first.call))) {
        return "lanes of one warp at different warp-collective calls: " + ThreadName(first) +
               " at " + CallName(first) + " and " + ThreadName(f) + " at " + CallName(f);
      }
    }
  }
  return "";
}

// Opens the barriers whose threads have all arrived; an error when threads
// wait on something that can never open.
bool OpenBarriers(BlockRun& run, Stats& stats) {
  const int n = static_cast<int>(run.fibers.size());
  bool opened = false;
  // Warp-collective calls. Lanes of one warp may wait in disjoint groups (a
  // __syncwarp of half the warp while the other half is at another); each
  // group opens on its own. `seen` skips the lanes of a group already tried.
  for (int w0 = 0; w0 < n; w0 += kWarpSize) {
    const int w1 = std::min(n, w0 + kWarpSize);
    unsigned seen = 0;
    for (int i = w0; i < w1; ++i) {
      Fiber& first = run.fibers[i];
      if (first.state != State::kAtWarp || (seen & (1u << (i - w0)))) continue;
      if (OpenWarpGroup(run, w0, first, stats)) {
        opened = true;
        continue;
      }
      if (!run.error.empty()) return false;
      for (int j = i; j < w1; ++j) {
        const Fiber& f = run.fibers[j];
        if (f.state == State::kAtWarp && f.warp_mask == first.warp_mask &&
            SameCall(f.call, first.call)) {
          seen |= 1u << (j - w0);
        }
      }
    }
  }
  if (opened) return true;
  // The block barrier: every thread there, none exited.
  int at_barrier = 0, at_warp = 0;
  const Fiber* exited = nullptr;
  for (const Fiber& f : run.fibers) {
    if (f.state == State::kAtBlockBarrier) {
      ++at_barrier;
    } else if (f.state == State::kAtWarp) {
      ++at_warp;
    } else if (f.state == State::kDone && exited == nullptr) {
      exited = &f;
    }
  }
  if (at_barrier == n) {
    for (Fiber& f : run.fibers) f.state = State::kRunnable;
    ++stats.barriers;
    return true;
  }
  if (at_warp > 0) {
    run.error = WarpDeadlock(run);
    return false;
  }
  if (at_barrier > 0 && exited != nullptr) {
    run.error = std::to_string(at_barrier) + " of " + std::to_string(n) +
                " threads wait at __syncthreads() while " + ThreadName(*exited) + " has exited";
  }
  return false;
}

// Runs one block to completion; false with run.error set on a fault.
bool RunBlock(BlockRun& run, Sim& sim, Order order, Stats& stats) {
  const int n = static_cast<int>(run.fibers.size());
  for (int i = 0; i < n; ++i) {
    Fiber& f = run.fibers[i];
    f.state = State::kRunnable;
    char* stack = sim.stacks.Get(static_cast<size_t>(i));
    if (stack == nullptr) {
      run.error = "cannot map a fiber stack";
      return false;
    }
    MakeContext(&f.context, stack, kStackBytes, FiberMain);
  }
  int remaining = n;
  while (remaining > 0) {
    bool ran = false;
    for (int k = 0; k < n; ++k) {
      Fiber& f = run.fibers[order == Order::kForward ? k : n - 1 - k];
      if (f.state != State::kRunnable) continue;
      run.current = &f;
      SwitchTo(&run.scheduler, &f.context);
      run.current = nullptr;
      if (f.state == State::kDone) --remaining;
      ran = true;
    }
    if (remaining == 0) break;
    if (!ran && !OpenBarriers(run, stats)) {
      if (run.error.empty()) run.error = "threads wait on nothing that can open";
      return false;
    }
  }
  return true;
}

std::string ShapeName(dim3 d) {
  std::ostringstream s;
  s << "(" << d.x << "," << d.y << "," << d.z << ")";
  return s.str();
}

}  // namespace

const ThreadVars* Current() {
  BlockRun* run = tl_run;
  return run == nullptr || run->current == nullptr ? nullptr : &run->current->vars;
}

void SyncThreads() {
  tl_run->current->state = State::kAtBlockBarrier;
  Yield();
}

void WarpSync(unsigned mask, const WarpCall& call) {
  Fiber* f = tl_run->current;
  f->warp_mask = mask;
  f->call = call;
  f->take_from = -1;
  f->state = State::kAtWarp;
  Yield();
}

void Shuffle(unsigned mask, const void* value, int src, void* out, int bytes) {
  Fiber* f = tl_run->current;
  f->offered = 0;
  std::memcpy(&f->offered, value, static_cast<size_t>(bytes));
  f->warp_mask = mask;
  f->call = WarpCall{"warp shuffle", nullptr, 0, false};
  // Out of range: the lane's own value (as for a lane outside the mask).
  f->take_from =
      src >= 0 && src < kWarpSize ? src : static_cast<int>(f - tl_run->fibers.data()) % kWarpSize;
  f->state = State::kAtWarp;
  Yield();
  std::memcpy(out, &f->taken, static_cast<size_t>(bytes));
}

void* DynamicShared() { return tl_run->dynamic_shared.data(); }

void Fault(int code, const std::string& what) {
  BlockRun* run = tl_run;
  if (run == nullptr || run->current == nullptr || !run->fault.empty()) return;
  run->fault = ThreadName(*run->current) + ": " + what;
  run->fault_code = code;
}

void CheckAligned(const void* p, int bytes) {
  if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0) return;
  std::ostringstream s;
  s << "misaligned " << bytes << "-byte access at " << p;
  Fault(cudaErrorMisalignedAddress, s.str());
}

void CheckWmmaAccess(const char* op, const void* p, unsigned ldm, int element_bytes) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0) {
    std::ostringstream s;
    s << op << " at " << p << ": the pointer must be 256-bit (32-byte) aligned";
    Fault(cudaErrorMisalignedAddress, s.str());
  }
  if (static_cast<uint64_t>(ldm) * static_cast<uint64_t>(element_bytes) % 16 != 0) {
    Fault(cudaErrorLaunchFailure,
          std::string(op) + " with ldm " + std::to_string(ldm) + ": ldm must be a multiple of " +
              std::to_string(16 / element_bytes) + " elements (16 bytes) for " +
              std::to_string(element_bytes) + "-byte elements");
  }
}

void SetOrder(Order order) {
  std::lock_guard<std::mutex> lock(Global().mu);
  Global().order = order;
}

Order GetOrder() {
  std::lock_guard<std::mutex> lock(Global().mu);
  return Global().order;
}

void SetMaxSharedBytesOptin(int64_t bytes) {
  std::lock_guard<std::mutex> lock(Global().mu);
  Global().max_shared_optin = bytes;
}

Stats GetStats() {
  std::lock_guard<std::mutex> lock(Global().mu);
  return Global().stats;
}

std::string LastError() {
  std::lock_guard<std::mutex> lock(Global().mu);
  return Global().last_error_message;
}

int SetFuncAttribute(const void* kernel, cudaFuncAttribute attr, int value) {
  Sim& sim = Global();
  std::lock_guard<std::mutex> lock(sim.mu);
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      value > sim.max_shared_optin) {
    sim.last_error_message = "cudaFuncSetAttribute: value " + std::to_string(value) +
                             " above the opt-in maximum " + std::to_string(sim.max_shared_optin);
    return cudaErrorInvalidValue;
  }
  sim.max_dynamic_shared[kernel] = value;
  return cudaSuccess;
}

int TakeLastLaunchError() {
  std::lock_guard<std::mutex> lock(Global().mu);
  const int e = Global().pending_error;
  Global().pending_error = 0;
  return e;
}

int PeekLastLaunchError() {
  std::lock_guard<std::mutex> lock(Global().mu);
  return Global().pending_error;
}

int Run(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes,
        const std::function<void()>& body) {
  Sim& sim = Global();
  std::lock_guard<std::mutex> launch_lock(sim.launch_mu);
  Order order;
  int64_t shared_limit;
  {
    std::lock_guard<std::mutex> lock(sim.mu);
    order = sim.order;
    auto it = sim.max_dynamic_shared.find(kernel);
    shared_limit = it == sim.max_dynamic_shared.end()
                       ? static_cast<int64_t>(kStaticSharedLimit)
                       : std::max<int64_t>(it->second, kStaticSharedLimit);
  }
  auto fail = [&](int code, const std::string& what) {
    std::lock_guard<std::mutex> lock(sim.mu);
    sim.last_error_message = what;
    sim.pending_error = code;
    return code;
  };
  const uint64_t threads = static_cast<uint64_t>(block.x) * block.y * block.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || threads == 0 || threads > kMaxThreads ||
      block.z > 64 || grid.y > 65535 || grid.z > 65535 || grid.x > 0x7fffffffu) {
    return fail(cudaErrorInvalidConfiguration,
                "launch of grid " + ShapeName(grid) + " x block " + ShapeName(block) +
                    ": the device takes 1-1024 threads per block (z <= 64), grid x <= 2^31-1, "
                    "y and z <= 65535");
  }
  if (static_cast<int64_t>(shared_bytes) > shared_limit) {
    return fail(cudaErrorInvalidValue,
                "launch with " + std::to_string(shared_bytes) +
                    " B of dynamic shared memory; this kernel may use " +
                    std::to_string(shared_limit) +
                    " B (above 48 KiB needs cudaFuncAttributeMaxDynamicSharedMemorySize)");
  }
  BlockRun run;
  run.body = &body;
  run.fibers.resize(threads);
  // Dynamic shared memory starts as all-ones bytes (a NaN in every float, -1 in
  // every integer), not zeros: a kernel reading what no thread wrote shows it.
  run.dynamic_shared.assign(std::max<size_t>(shared_bytes, 16), static_cast<char>(0xFF));
  Stats stats;
  ++stats.launches;
  BlockRun* outer = tl_run;
  tl_run = &run;
  const uint64_t blocks = static_cast<uint64_t>(grid.x) * grid.y * grid.z;
  bool ok = true;
  for (uint64_t k = 0; k < blocks && ok; ++k) {
    const uint64_t b = order == Order::kForward ? k : blocks - 1 - k;
    const uint3 block_idx{static_cast<unsigned>(b % grid.x),
                          static_cast<unsigned>((b / grid.x) % grid.y),
                          static_cast<unsigned>(b / (static_cast<uint64_t>(grid.x) * grid.y))};
    for (uint64_t t = 0; t < threads; ++t) {
      ThreadVars& v = run.fibers[t].vars;
      v.thread_idx = {static_cast<unsigned>(t % block.x),
                      static_cast<unsigned>((t / block.x) % block.y),
                      static_cast<unsigned>(t / (static_cast<uint64_t>(block.x) * block.y))};
      v.block_idx = block_idx;
      v.block_dim = block;
      v.grid_dim = grid;
    }
    ok = RunBlock(run, sim, order, stats);
    if (ok && !run.fault.empty()) {
      ok = false;
      run.error = run.fault;
    }
    if (!ok) run.error = BlockName(block_idx) + ": " + run.error;
    ++stats.blocks;
    stats.threads += static_cast<int64_t>(threads);
  }
  tl_run = outer;
  {
    std::lock_guard<std::mutex> lock(sim.mu);
    sim.stats.launches += stats.launches;
    sim.stats.blocks += stats.blocks;
    sim.stats.threads += stats.threads;
    sim.stats.barriers += stats.barriers;
    sim.stats.shuffles += stats.shuffles;
    sim.stats.warp_syncs += stats.warp_syncs;
  }
  if (!ok)
    return fail(
        run.fault.empty() ? cudaErrorLaunchFailure : run.fault_code,
        "launch of grid " + ShapeName(grid) + " x block " + ShapeName(block) + ": " + run.error);
  std::lock_guard<std::mutex> lock(sim.mu);
  sim.last_error_message.clear();
  return cudaSuccess;
}

}  // namespace zs_cuda_sim
