// The fiber scheduler behind cuda_sim.h. One launch at a time (a process-wide
// mutex): blocks run one after another, the threads of a block as fibers on
// the launching thread, switched at barriers and shuffles. On x86-64 a fiber
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

enum class State { kRunnable, kAtBlockBarrier, kAtShuffle, kDone };

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
  int shuffle_count = 0;  // shuffles this thread has completed
  unsigned shuffle_mask = 0;
};

struct WarpSlots {
  // Double buffered by the parity of the shuffle count: a lane cannot store
  // into a buffer another lane has yet to read (see Shuffle).
  uint64_t value[2][kWarpSize];
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
  std::vector<WarpSlots> warps;
  Context scheduler;
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  std::vector<char> dynamic_shared;
  std::string error;
  std::string fault;  // a misaligned access (CheckAligned): the first one
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

// Opens the barriers whose threads have all arrived; an error when threads
// wait on something that can never open.
bool OpenBarriers(BlockRun& run, Stats& stats) {
  const int n = static_cast<int>(run.fibers.size());
  bool opened = false;
  // Warp shuffles: every lane of the mask at its shuffle with the same count.
  for (int w0 = 0; w0 < n; w0 += kWarpSize) {
    const int w1 = std::min(n, w0 + kWarpSize);
    Fiber* first = nullptr;
    for (int i = w0; i < w1; ++i) {
      if (run.fibers[i].state == State::kAtShuffle) {
        first = &run.fibers[i];
        break;
      }
    }
    if (first == nullptr) continue;
    const unsigned mask = first->shuffle_mask;
    bool ready = true;
    for (int lane = 0; lane < kWarpSize; ++lane) {
      if (!(mask & (1u << lane))) continue;
      const int i = w0 + lane;
      if (i >= n) {
        run.error = "warp shuffle with mask " + std::to_string(mask) + " names lane " +
                    std::to_string(lane) + ", which this block (" + std::to_string(n) +
                    " threads) does not have";
        return false;
      }
      const Fiber& f = run.fibers[i];
      if (f.state == State::kDone) {
        run.error = "warp shuffle waits for " + ThreadName(f) + ", which has exited";
        return false;
      }
      if (f.state != State::kAtShuffle) {
        ready = false;
        continue;
      }
      if (f.shuffle_mask != mask || f.shuffle_count != first->shuffle_count) {
        run.error = "lanes of one warp at different shuffles: " + ThreadName(*first) +
                    " (shuffle " + std::to_string(first->shuffle_count) + ", mask " +
                    std::to_string(mask) + ") and " + ThreadName(f) + " (shuffle " +
                    std::to_string(f.shuffle_count) + ", mask " + std::to_string(f.shuffle_mask) +
                    ")";
        return false;
      }
    }
    if (!ready) continue;
    for (int lane = 0; lane < kWarpSize; ++lane) {
      if (mask & (1u << lane)) run.fibers[w0 + lane].state = State::kRunnable;
    }
    ++stats.shuffles;
    opened = true;
  }
  if (opened) return true;
  // The block barrier: every thread there, none exited.
  int at_barrier = 0, done = 0;
  const Fiber* other = nullptr;
  for (const Fiber& f : run.fibers) {
    if (f.state == State::kAtBlockBarrier) {
      ++at_barrier;
    } else if (f.state == State::kDone) {
      ++done;
      if (other == nullptr) other = &f;
    } else if (other == nullptr || other->state == State::kDone) {
      other = &f;
    }
  }
  if (at_barrier == 0) return false;
  if (at_barrier == n) {
    for (Fiber& f : run.fibers) f.state = State::kRunnable;
    ++stats.barriers;
    return true;
  }
  run.error = std::to_string(at_barrier) + " of " + std::to_string(n) +
              " threads wait at __syncthreads() while " + ThreadName(*other) +
              (other->state == State::kDone ? " has exited" : " waits at a warp shuffle");
  return false;
}

// Runs one block to completion; false with run.error set on a fault.
bool RunBlock(BlockRun& run, Sim& sim, Order order, Stats& stats) {
  const int n = static_cast<int>(run.fibers.size());
  for (int i = 0; i < n; ++i) {
    Fiber& f = run.fibers[i];
    f.state = State::kRunnable;
    f.shuffle_count = 0;
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

void Shuffle(unsigned mask, const void* value, int src, void* out, int bytes) {
  BlockRun* run = tl_run;
  Fiber* f = run->current;
  const int index = static_cast<int>(f - run->fibers.data());
  const int warp = index / kWarpSize, lane = index % kWarpSize;
  const int parity = f->shuffle_count & 1;
  uint64_t stored = 0;
  std::memcpy(&stored, value, static_cast<size_t>(bytes));
  WarpSlots& slots = run->warps[static_cast<size_t>(warp)];
  slots.value[parity][lane] = stored;
  f->shuffle_mask = mask;
  f->state = State::kAtShuffle;
  Yield();
  // Every lane of the mask has stored; lanes outside it give undefined values
  // on the device, here their own.
  const int from = (src >= 0 && src < kWarpSize && (mask & (1u << src))) ? src : lane;
  std::memcpy(out, &slots.value[parity][from], static_cast<size_t>(bytes));
  ++f->shuffle_count;
}

void* DynamicShared() { return tl_run->dynamic_shared.data(); }

void CheckAligned(const void* p, int bytes) {
  BlockRun* run = tl_run;
  if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0 || run == nullptr ||
      !run->fault.empty()) {
    return;
  }
  std::ostringstream s;
  s << ThreadName(*run->current) << ": misaligned " << bytes << "-byte access at " << p;
  run->fault = s.str();
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
  run.warps.resize((threads + kWarpSize - 1) / kWarpSize);
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
  }
  if (!ok)
    return fail(run.fault.empty() ? cudaErrorLaunchFailure : cudaErrorMisalignedAddress,
                "launch of grid " + ShapeName(grid) + " x block " +
                                            ShapeName(block) + ": " + run.error);
  std::lock_guard<std::mutex> lock(sim.mu);
  sim.last_error_message.clear();
  return cudaSuccess;
}

}  // namespace zs_cuda_sim
