// absl_tsan: ThreadSanitizer's view of Debian's Abseil synchronization.
//
// Linked into every test built with --config=tsan, and only there:
// //tests:testing depends on //tools/sanitizers:absl_tsan under the
// config_setting //tools/sanitizers:tsan (--define=zs_sanitizer=tsan, which
// .bazelrc's build:tsan sets). docs/reliability.md, "Sanitizers and fuzzing";
// tools/sanitizers/absl_tsan_test.cc checks each edge below.
//
// The problem. TSan learns happens-before from the code it instrumented
// (atomics) and from its interceptors (pthread_mutex_*, pthread_cond_*, ...).
// Debian's libabsl_synchronization.so is built without -fsanitize=thread, and
// absl::Mutex does not call pthread: it locks with atomics on its own word and
// parks threads on futexes. TSan sees none of it, so two threads that touch
// data only under one absl::Mutex look unsynchronised, and every such access
// is reported as a data race.
//
// The fix: symbol interposition. This file defines the entry points of
// absl::Mutex, absl::CondVar, absl::Notification and absl::BlockingCounter
// (and absl::Status's reference drop, below) under their own mangled names.
// The dynamic linker binds every reference to the first definition in the
// global lookup order: the executable, then its DT_NEEDED libraries
// breadth-first in link order. Bazel puts a test's own libraries (this one's
// shared object, or its object file when linked statically) on the link line
// before the -labsl_* flags of @absl, so our definitions come first: calls
// from our code, and calls from inside libabsl_synchronization.so itself,
// which go through its PLT (Notification, Barrier and BlockingCounter call
// Mutex::Lock, Await and Unlock there; the library is built with default
// visibility and without -Bsymbolic), all reach the wrappers below. Each
// forwards to the real function, found with dlsym(RTLD_NEXT, "<mangled name>")
// (the next definition after this object: the .so's), and tells TSan the edge
// it makes:
//
//   takes the lock (Lock, ReaderLock, a TryLock that succeeds, LockWhen*):
//       __tsan_acquire(mu) after;
//   gives it up (Unlock, ReaderUnlock): __tsan_release(mu) before;
//   gives it up and takes it back (Await*, CondVar::Wait*): both.
//
// A constructor (CheckInterposed) aborts the process at load time if
// absl::Mutex::Lock or Status::UnrefNonInlined does not resolve to this
// library, so a link order that defeats the interposition cannot pass
// silently as "no races".
//
// Conditions. absl evaluates a waiter's Condition on whichever thread holds
// the lock at that moment, often the one inside Unlock, which our wrapper has
// already released: TSan would see those reads after the release, unordered
// with the waiter's writes once it wakes. Await and LockWhen* therefore hand
// absl a Condition that wraps the caller's in acquire ... release on the mutex
// (EvalLocked), which puts the evaluation inside the critical section as TSan
// sees it (absl's own TSan build does the same in EvalConditionAnnotated), and
// that carries the waiter's own edge to the evaluating thread (Publish): absl
// hands the queued Condition over inside the library.
//
// Notification. When a waiter blocks, Notify and WaitForNotification* meet in
// the mutex wrappers; a waiter that finds the flag already set returns without
// the mutex, so Notify releases and a successful wait acquires on the
// Notification itself. HasBeenNotified() is inline in the header: it compiles
// into our instrumented code as an acquire load of `notified_yet_`, and an
// instrumented atomic acquires TSan's sync object at its own address, so Notify
// releases there too (NotifiedYet). BlockingCounter::DecrementCount takes the
// mutex only for the last count, so it releases on the counter and Wait
// acquires. Barrier::Block is Lock, Await, Unlock: covered by the mutex.
//
// absl::Status. Copies share one reference-counted StatusRep (message,
// payloads). The count goes up inline (instrumented) but down in
// Status::UnrefNonInlined inside libabsl_status.so, whose acquire/release
// decrement TSan cannot see, so the last owner's delete looked unordered with
// another thread's read of the message. A forwarding wrapper cannot tell which
// call deletes, so UnrefNonInlined is defined here in full: the same lines as
// absl 20220623's status.cc, compiled with TSan so that it sees the atomics.
//
// Load-time warm-ups (WarmUp), before any thread exists, for lazily filled
// shared state that threads would otherwise fill concurrently or read without
// an edge TSan can see:
//   - libstdc++'s std::ctype<char>::narrow (inline in <bits/locale_facets.h>,
//     so instrumented) caches each character in the shared locale facet on
//     first use; two threads compiling a std::regex at once both write it
//     (GCC PR 77704; checkpoint/load.cc compiles regexes on every rank's
//     thread). Each writes the byte it would read, so the program is
//     unaffected, but the writes are unsynchronised. Filling the cache once is
//     the workaround from that report.
//   - absl's errno text table (base_internal::StrError, behind
//     absl::ErrnoToStatus) is a function-local static in an uninstrumented
//     library: a thread that finds it built skips the guard functions TSan
//     intercepts, so its reads had no edge from the thread that built it.
//
// Not covered, as the tests do not reach them across threads: absl's SpinLock
// and call_once, other function-local statics inside uninstrumented
// libraries, Mutex destruction (a destroyed Mutex's sync state lingers until
// its memory is freed: at worst an extra edge, which can hide a race but never
// invents one).
//
// Why only under TSan. __tsan_acquire and __tsan_release exist only in the
// TSan runtime, and the wrappers would add an indirect call to every lock for
// nothing in other builds. An Abseil built with TSan needs none of this, and
// another inline namespace than Debian's "debian3" would need new mangled
// names: the static_assert below stops the build then.

#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <locale>
#include <string_view>

#include "absl/base/config.h"
#include "absl/base/options.h"
#include "absl/status/status.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

#define ZS_TSAN_STR2(x) #x
#define ZS_TSAN_STR(x) ZS_TSAN_STR2(x)
static_assert(std::string_view(ZS_TSAN_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME)) == "debian3",
              "tools/sanitizers/tsan_support.cc names Debian's Abseil symbols "
              "(_ZN4absl7debian3...): update the mangled names below");

namespace {

// The mangled names, from
// `nm -D --defined-only /usr/lib/x86_64-linux-gnu/libabsl_synchronization.so.20220623`.
#define ZS_ABSL "_ZN4absl7debian3"
#define ZS_ABSL_CONST "_ZNK4absl7debian3"
constexpr char kLock[] = ZS_ABSL "5Mutex4LockEv";
constexpr char kUnlock[] = ZS_ABSL "5Mutex6UnlockEv";
constexpr char kReaderLock[] = ZS_ABSL "5Mutex10ReaderLockEv";
constexpr char kReaderUnlock[] = ZS_ABSL "5Mutex12ReaderUnlockEv";
constexpr char kTryLock[] = ZS_ABSL "5Mutex7TryLockEv";
constexpr char kReaderTryLock[] = ZS_ABSL "5Mutex13ReaderTryLockEv";
constexpr char kLockWhen[] = ZS_ABSL "5Mutex8LockWhenERKNS0_9ConditionE";
constexpr char kReaderLockWhen[] = ZS_ABSL "5Mutex14ReaderLockWhenERKNS0_9ConditionE";
constexpr char kLockWhenWithTimeout[] =
    ZS_ABSL "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE";
constexpr char kLockWhenWithDeadline[] =
    ZS_ABSL "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE";
constexpr char kReaderLockWhenWithTimeout[] =
    ZS_ABSL "5Mutex25ReaderLockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE";
constexpr char kReaderLockWhenWithDeadline[] =
    ZS_ABSL "5Mutex26ReaderLockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE";
constexpr char kAwait[] = ZS_ABSL "5Mutex5AwaitERKNS0_9ConditionE";
constexpr char kAwaitWithTimeout[] =
    ZS_ABSL "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE";
constexpr char kAwaitWithDeadline[] =
    ZS_ABSL "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE";
constexpr char kCondVarWait[] = ZS_ABSL "7CondVar4WaitEPNS0_5MutexE";
constexpr char kCondVarWaitWithTimeout[] =
    ZS_ABSL "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE";
constexpr char kCondVarWaitWithDeadline[] =
    ZS_ABSL "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE";
constexpr char kNotify[] = ZS_ABSL "12Notification6NotifyEv";
constexpr char kWaitForNotification[] = ZS_ABSL_CONST "12Notification19WaitForNotificationEv";
constexpr char kWaitForNotificationWithTimeout[] =
    ZS_ABSL_CONST "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE";
constexpr char kWaitForNotificationWithDeadline[] =
    ZS_ABSL_CONST "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE";
constexpr char kDecrementCount[] = ZS_ABSL "15BlockingCounter14DecrementCountEv";
constexpr char kBlockingCounterWait[] = ZS_ABSL "15BlockingCounter4WaitEv";
// Defined here in full, not forwarded (libabsl_status.so).
constexpr char kUnrefNonInlined[] = ZS_ABSL "6Status15UnrefNonInlinedEm";
#undef ZS_ABSL
#undef ZS_ABSL_CONST

// The real function: the next definition of `name` after this object.
// A member function is called with `this` as its first argument.
template <typename Fn>
Fn Real(const char* name) {
  void* fn = dlsym(RTLD_NEXT, name);
  if (fn == nullptr) {
    std::fprintf(stderr,
                 "absl_tsan: dlsym(RTLD_NEXT, \"%s\") found nothing (%s); expected the "
                 "definition in libabsl_synchronization.so\n",
                 name, dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

// Looked up once, on first use (a function-local static: thread-safe).
#define ZS_REAL(type, name) static const auto real = Real<type>(name)

// A Condition evaluated inside the critical section as TSan sees it (see
// "Conditions" above). Lives on the waiter's stack for the whole call.
struct LockedCondition {
  const absl::Condition* cond;
  absl::Mutex* mu;
};

bool EvalLocked(void* arg) {
  __tsan_acquire(arg);  // Publish's edge, when another thread evaluates it
  const auto* c = static_cast<const LockedCondition*>(arg);
  __tsan_acquire(c->mu);
  const bool result = c->cond->Eval();
  __tsan_release(c->mu);
  return result;
}

// absl queues the waiter's Condition where other threads evaluate it: this
// struct, and whatever the caller's condition reads (written by the waiter,
// possibly without the lock, before LockWhen). The queueing is an edge inside
// the library; Publish and EvalLocked's first acquire give it to TSan.
absl::Condition Publish(LockedCondition* locked) {
  __tsan_release(locked);
  return absl::Condition(&EvalLocked, static_cast<void*>(locked));
}

// `notified_yet_`, the member after `mutex_` (absl/synchronization/notification.h).
// A wrong address would leave HasBeenNotified() without its edge, and
// tools/sanitizers:absl_tsan_test's HasBeenNotified case would report a race.
static_assert(sizeof(absl::Notification) == 2 * sizeof(absl::Mutex),
              "absl::Notification is no longer {Mutex mutex_; atomic<bool> notified_yet_;}");
void* NotifiedYet(const absl::Notification* n) {
  return const_cast<char*>(reinterpret_cast<const char*>(n)) + sizeof(absl::Mutex);
}

// Fails loudly when the definitions here are not the ones the process uses
// (a link order that puts Abseil's libraries first): every absl::Mutex would
// then be invisible to TSan again.
__attribute__((constructor)) void CheckInterposed() {
  Dl_info self_info{};
  if (dladdr(reinterpret_cast<void*>(&CheckInterposed), &self_info) == 0) std::abort();
  for (const char* name : {kLock, kUnrefNonInlined}) {
    void* const used = dlsym(RTLD_DEFAULT, name);
    Dl_info used_info{};
    if (used == nullptr || dladdr(used, &used_info) == 0 ||
        used_info.dli_fbase != self_info.dli_fbase) {
      std::fprintf(stderr,
                   "absl_tsan: %s resolves to %s, not to %s "
                   "(tools/sanitizers/tsan_support.cc): it must be linked ahead of Abseil's "
                   "libraries\n",
                   name, used_info.dli_fname ? used_info.dli_fname : "nothing",
                   self_info.dli_fname ? self_info.dli_fname : "this library");
      std::abort();
    }
  }
}

// See "Load-time warm-ups" above.
__attribute__((constructor)) void WarmUp() {
  const auto& ctype = std::use_facet<std::ctype<char>>(std::locale());
  for (int c = 0; c < 256; ++c) ctype.narrow(static_cast<char>(c), '\0');
  if (absl::ErrnoToStatus(EIO, "").ok()) std::abort();
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

// ---------------------------------------------------------------------------
// Mutex
// ---------------------------------------------------------------------------

void Mutex::Lock() {
  ZS_REAL(void (*)(Mutex*), kLock);
  real(this);
  __tsan_acquire(this);
}

void Mutex::Unlock() {
  ZS_REAL(void (*)(Mutex*), kUnlock);
  __tsan_release(this);
  real(this);
}

void Mutex::ReaderLock() {
  ZS_REAL(void (*)(Mutex*), kReaderLock);
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderUnlock() {
  ZS_REAL(void (*)(Mutex*), kReaderUnlock);
  __tsan_release(this);
  real(this);
}

bool Mutex::TryLock() {
  ZS_REAL(bool (*)(Mutex*), kTryLock);
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

bool Mutex::ReaderTryLock() {
  ZS_REAL(bool (*)(Mutex*), kReaderTryLock);
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::LockWhen(const Condition& cond) {
  ZS_REAL(void (*)(Mutex*, const Condition&), kLockWhen);
  LockedCondition locked{&cond, this};
  real(this, Publish(&locked));
  __tsan_acquire(this);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  ZS_REAL(void (*)(Mutex*, const Condition&), kReaderLockWhen);
  LockedCondition locked{&cond, this};
  real(this, Publish(&locked));
  __tsan_acquire(this);
}

// The timed forms hold the lock on return whether or not `cond` became true.
bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  ZS_REAL(bool (*)(Mutex*, const Condition&, Duration), kLockWhenWithTimeout);
  LockedCondition locked{&cond, this};
  const bool result = real(this, Publish(&locked), timeout);
  __tsan_acquire(this);
  return result;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  ZS_REAL(bool (*)(Mutex*, const Condition&, Time), kLockWhenWithDeadline);
  LockedCondition locked{&cond, this};
  const bool result = real(this, Publish(&locked), deadline);
  __tsan_acquire(this);
  return result;
}

bool Mutex::ReaderLockWhenWithTimeout(const Condition& cond, Duration timeout) {
  ZS_REAL(bool (*)(Mutex*, const Condition&, Duration), kReaderLockWhenWithTimeout);
  LockedCondition locked{&cond, this};
  const bool result = real(this, Publish(&locked), timeout);
  __tsan_acquire(this);
  return result;
}

bool Mutex::ReaderLockWhenWithDeadline(const Condition& cond, Time deadline) {
  ZS_REAL(bool (*)(Mutex*, const Condition&, Time), kReaderLockWhenWithDeadline);
  LockedCondition locked{&cond, this};
  const bool result = real(this, Publish(&locked), deadline);
  __tsan_acquire(this);
  return result;
}

// Await* is called with the lock held, gives it up while it waits and holds
// it again on return.
void Mutex::Await(const Condition& cond) {
  ZS_REAL(void (*)(Mutex*, const Condition&), kAwait);
  LockedCondition locked{&cond, this};
  __tsan_release(this);
  real(this, Publish(&locked));
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  ZS_REAL(bool (*)(Mutex*, const Condition&, Duration), kAwaitWithTimeout);
  LockedCondition locked{&cond, this};
  __tsan_release(this);
  const bool result = real(this, Publish(&locked), timeout);
  __tsan_acquire(this);
  return result;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  ZS_REAL(bool (*)(Mutex*, const Condition&, Time), kAwaitWithDeadline);
  LockedCondition locked{&cond, this};
  __tsan_release(this);
  const bool result = real(this, Publish(&locked), deadline);
  __tsan_acquire(this);
  return result;
}

// ---------------------------------------------------------------------------
// CondVar: the waiter gives `mu` up and holds it again on return (also on a
// timeout). Signal needs no edge: the woken thread takes `mu` again.
// ---------------------------------------------------------------------------

void CondVar::Wait(Mutex* mu) {
  ZS_REAL(void (*)(CondVar*, Mutex*), kCondVarWait);
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  ZS_REAL(bool (*)(CondVar*, Mutex*, Duration), kCondVarWaitWithTimeout);
  __tsan_release(mu);
  const bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  ZS_REAL(bool (*)(CondVar*, Mutex*, Time), kCondVarWaitWithDeadline);
  __tsan_release(mu);
  const bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

// ---------------------------------------------------------------------------
// Notification
// ---------------------------------------------------------------------------

void Notification::Notify() {
  ZS_REAL(void (*)(Notification*), kNotify);
  __tsan_release(this);
  __tsan_release(NotifiedYet(this));  // for the inline HasBeenNotified()
  real(this);
}

void Notification::WaitForNotification() const {
  ZS_REAL(void (*)(const Notification*), kWaitForNotification);
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(Duration timeout) const {
  ZS_REAL(bool (*)(const Notification*, Duration), kWaitForNotificationWithTimeout);
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(Time deadline) const {
  ZS_REAL(bool (*)(const Notification*, Time), kWaitForNotificationWithDeadline);
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

// ---------------------------------------------------------------------------
// BlockingCounter: only the last DecrementCount takes the mutex; the others
// are an atomic decrement inside the library.
// ---------------------------------------------------------------------------

bool BlockingCounter::DecrementCount() {
  ZS_REAL(bool (*)(BlockingCounter*), kDecrementCount);
  __tsan_release(this);
  return real(this);
}

void BlockingCounter::Wait() {
  ZS_REAL(void (*)(BlockingCounter*), kBlockingCounterWait);
  real(this);
  __tsan_acquire(this);
}

// ---------------------------------------------------------------------------
// Status: see "absl::Status" above. This is status.cc's UnrefNonInlined.
// ---------------------------------------------------------------------------

void Status::UnrefNonInlined(uintptr_t rep) {
  status_internal::StatusRep* r = RepToPointer(rep);
  // Fast path: if ref == 1 this is the only reference, and no other thread
  // may touch r.
  if (r->ref.load(std::memory_order_acquire) == 1 ||
      r->ref.fetch_sub(1, std::memory_order_acq_rel) - 1 == 0) {
    delete r;
  }
}

ABSL_NAMESPACE_END
}  // namespace absl
