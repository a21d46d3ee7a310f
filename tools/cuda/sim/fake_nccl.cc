// The NCCL calls of collectives/nccl_communicator.cc answered between threads
// of one process, for the simulated device (--define=cuda_sim=1; see
// fake_cudart.cc): linked instead of libnccl there, so the NCCL collectives
// suite and the sharded GPT on "GPUs" run where there is none.
//
// Each rank is a thread (as the in-process worlds of the tests are); device
// memory is host memory, so a rank reads its peers' buffers directly. A
// collective blocks until every rank of the communicator has called it (the
// real calls only enqueue; the simulated device has no queue), then each rank
// computes its own result into scratch, all meet again, and each writes its
// result: in-place calls and buffers reused at once are safe. Reductions add
// in rank order in fp32 (f32, bf16, f16) or in the integer type; MAX is
// fmaxf-like (NaN loses), as NCCL's. Group calls run their members at once, in
// the order issued, which is what NCCL promises to every rank that issues the
// same sequence. ncclCommAbort wakes waiting ranks with ncclSystemError.
//
// Point-to-point (ncclSend / ncclRecv, what an all-to-all is made of): inside
// ncclGroupStart/End they are kept (per thread, as NCCL keeps its group) and
// run at the outermost ncclGroupEnd; outside a group each is a group of its
// own. Running a group posts every send (the buffer, in its communicator's
// mailbox for that (sender, receiver) pair, taken in the order posted as NCCL
// matches them), then takes each receive's send, copying straight from the
// sender's buffer, then waits until its own sends were taken: so every rank
// may send before it receives (the deadlock NCCL's groups exist to avoid
// cannot happen), a rank may send to itself, and a send buffer is free again
// when ncclGroupEnd returns. A receive whose count differs from its send's is
// ncclInvalidArgument.
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "zeroshard/runtime/half.h"

namespace {

using ::zeroshard::BFloat16;
using ::zeroshard::Float16;

// What one rank brought to the collective in progress.
struct Arrival {
  const void* send = nullptr;
  int color = 0, key = 0;  // ncclCommSplit
};

struct Group;

}  // namespace

struct ncclComm {
  std::shared_ptr<Group> group;
  int rank = 0;
};

namespace {

// A send posted and not yet received.
struct Posted {
  const void* buf = nullptr;
  size_t bytes = 0;
};

struct Group {
  explicit Group(int n)
      : size(n), arrivals(static_cast<size_t>(n)), unreceived(static_cast<size_t>(n), 0) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  int64_t generation = 0;
  bool aborted = false;
  std::vector<Arrival> arrivals;
  // ncclCommSplit: the new groups of the split in progress, by color.
  std::map<int, std::shared_ptr<Group>> split;
  // Point-to-point: sends posted by (sender, receiver), oldest first, and how
  // many of each sender's sends no receiver has taken yet.
  std::map<std::pair<int, int>, std::deque<Posted>> mail;
  std::vector<int> unreceived;

  // Waits until all ranks have arrived (a generation barrier).
  bool Meet(std::unique_lock<std::mutex>& lock) {
    const int64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return !aborted;
    }
    cv.wait(lock, [&] { return generation != gen || aborted; });
    return !aborted;
  }
};

// Communicators being created, by unique id.
std::mutex registry_mu;
std::map<std::string, std::shared_ptr<Group>>& Registry() {
  static auto* r = new std::map<std::string, std::shared_ptr<Group>>();
  return *r;
}
std::atomic<uint64_t> next_id{1};

size_t TypeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

template <typename T>
T Combine(T a, T b, ncclRedOp_t op) {
  switch (op) {
    case ncclMax:
      return b > a ? b : a;  // a NaN (in floats) loses, as fmaxf
    case ncclMin:
      return b < a ? b : a;
    case ncclProd:
      return a * b;
    default:
      return a + b;  // ncclSum, ncclAvg (divided at the end)
  }
}

float ToF(const void* p, ncclDataType_t t, size_t i) {
  switch (t) {
    case ncclFloat16:
      return static_cast<float>(static_cast<const Float16*>(p)[i]);
    case ncclBfloat16:
      return static_cast<float>(static_cast<const BFloat16*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

void FromF(void* p, ncclDataType_t t, size_t i, float v) {
  switch (t) {
    case ncclFloat16:
      static_cast<Float16*>(p)[i] = Float16(v);
      break;
    case ncclBfloat16:
      static_cast<BFloat16*>(p)[i] = BFloat16(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
      break;
  }
}

template <typename T>
void ReduceInts(const std::vector<const void*>& in, size_t offset, size_t count, ncclRedOp_t op,
                void* out) {
  T* o = static_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) {
    T acc = static_cast<const T*>(in[0])[offset + i];
    for (size_t r = 1; r < in.size(); ++r)
      acc = Combine(acc, static_cast<const T*>(in[r])[offset + i], op);
    if (op == ncclAvg) acc = static_cast<T>(acc / static_cast<T>(in.size()));
    o[i] = acc;
  }
}

// out[0, count) = reduce over ranks of in[r][offset, offset + count).
ncclResult_t Reduce(const std::vector<const void*>& in, size_t offset, size_t count,
                    ncclDataType_t t, ncclRedOp_t op, void* out) {
  switch (t) {
    case ncclInt32:
      ReduceInts<int32_t>(in, offset, count, op, out);
      return ncclSuccess;
    case ncclInt64:
      ReduceInts<int64_t>(in, offset, count, op, out);
      return ncclSuccess;
    case ncclInt8:
      ReduceInts<int8_t>(in, offset, count, op, out);
      return ncclSuccess;
    case ncclUint8:
      ReduceInts<uint8_t>(in, offset, count, op, out);
      return ncclSuccess;
    case ncclFloat64:
      ReduceInts<double>(in, offset, count, op, out);
      return ncclSuccess;
    case ncclFloat32:
    case ncclFloat16:
    case ncclBfloat16:
      for (size_t i = 0; i < count; ++i) {
        float acc = ToF(in[0], t, offset + i);
        for (size_t r = 1; r < in.size(); ++r) acc = Combine(acc, ToF(in[r], t, offset + i), op);
        if (op == ncclAvg) acc /= static_cast<float>(in.size());
        FromF(out, t, i, acc);
      }
      return ncclSuccess;
    default:
      return ncclInvalidArgument;
  }
}

// Runs one collective: every rank arrives with its send buffer, computes its
// result into scratch with `compute(sends, scratch)`, all meet, each copies
// scratch into `recv`.
template <typename Compute>
ncclResult_t Collective(ncclComm_t comm, const void* send, void* recv, size_t recv_bytes,
                        const Compute& compute) {
  if (comm == nullptr || comm->group == nullptr) return ncclInvalidArgument;
  Group& g = *comm->group;
  std::vector<char> scratch(recv_bytes);
  std::unique_lock<std::mutex> lock(g.mu);
  g.arrivals[static_cast<size_t>(comm->rank)].send = send;
  if (!g.Meet(lock)) return ncclSystemError;
  std::vector<const void*> sends;
  for (const Arrival& a : g.arrivals) sends.push_back(a.send);
  lock.unlock();
  const ncclResult_t r = compute(sends, scratch.data());
  lock.lock();
  if (!g.Meet(lock)) return ncclSystemError;  // everyone has read every send buffer
  lock.unlock();
  if (r == ncclSuccess && recv_bytes > 0) std::memcpy(recv, scratch.data(), recv_bytes);
  return r;
}

// One ncclSend or ncclRecv kept for its group's end.
struct P2p {
  bool send = false;
  ncclComm_t comm = nullptr;
  void* buf = nullptr;  // const for a send
  size_t bytes = 0;
  int peer = 0;
};

// This thread's ncclGroupStart depth and the point-to-point calls of its group.
thread_local int group_depth = 0;
thread_local std::vector<P2p> group_p2p;

ncclResult_t P2pCall(P2p op) {
  if (op.comm == nullptr || op.comm->group == nullptr) return ncclInvalidArgument;
  if (op.peer < 0 || op.peer >= op.comm->group->size) return ncclInvalidArgument;
  if (op.bytes > 0 && op.buf == nullptr) return ncclInvalidArgument;
  group_p2p.push_back(op);
  return ncclSuccess;
}

// Runs the point-to-point calls of a group: every send posted, every receive
// taken, then this thread's sends received (see the top of the file).
ncclResult_t RunP2p(std::vector<P2p> ops) {
  ncclResult_t result = ncclSuccess;
  for (const P2p& op : ops) {
    if (!op.send) continue;
    Group& g = *op.comm->group;
    std::lock_guard<std::mutex> lock(g.mu);
    g.mail[{op.comm->rank, op.peer}].push_back(Posted{op.buf, op.bytes});
    ++g.unreceived[static_cast<size_t>(op.comm->rank)];
    g.cv.notify_all();
  }
  for (const P2p& op : ops) {
    if (op.send) continue;
    Group& g = *op.comm->group;
    std::unique_lock<std::mutex> lock(g.mu);
    std::deque<Posted>& box = g.mail[{op.peer, op.comm->rank}];
    g.cv.wait(lock, [&] { return !box.empty() || g.aborted; });
    if (g.aborted) return ncclSystemError;
    const Posted sent = box.front();
    box.pop_front();
    if (sent.bytes != op.bytes) {
      result = ncclInvalidArgument;
    } else if (op.bytes > 0) {
      std::memcpy(op.buf, sent.buf, op.bytes);
    }
    --g.unreceived[static_cast<size_t>(op.peer)];
    g.cv.notify_all();
  }
  for (const P2p& op : ops) {
    if (!op.send) continue;
    Group& g = *op.comm->group;
    std::unique_lock<std::mutex> lock(g.mu);
    g.cv.wait(lock, [&] { return g.unreceived[static_cast<size_t>(op.comm->rank)] == 0 || g.aborted; });
    if (g.aborted) return ncclSystemError;
  }
  return result;
}

}  // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclInvalidArgument:
      return "invalid argument (cuda_sim)";
    case ncclSystemError:
      return "system error: communicator aborted (cuda_sim)";
    default:
      return "NCCL error (cuda_sim)";
  }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  std::memset(id, 0, sizeof(*id));
  const std::string name = "cuda_sim:" + std::to_string(next_id.fetch_add(1));
  std::memcpy(id->internal, name.data(), name.size());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  const std::string key(id.internal, strnlen(id.internal, sizeof(id.internal)));
  std::shared_ptr<Group> group;
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    auto& slot = Registry()[key];
    if (slot == nullptr) slot = std::make_shared<Group>(nranks);
    group = slot;
  }
  if (group->size != nranks) return ncclInvalidArgument;
  {
    std::unique_lock<std::mutex> lock(group->mu);
    if (!group->Meet(lock)) return ncclSystemError;  // every rank has joined
  }
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    Registry().erase(key);  // idempotent: the id is spent
  }
  *comm = new ncclComm{group, rank};
  return ncclSuccess;
}

// One thread creates every rank's communicator at once (no rank meets
// another, so nothing waits). The simulated devices are one host memory, so
// devlist only has to be well formed (ndev distinct non-negative ids; NULL
// means 0 .. ndev - 1): the ranks are its positions. The collectives on these
// communicators still block until every rank has called them, so with ndev > 1
// each rank needs a thread of its own: one thread issuing a group of calls
// for all of them (as real NCCL allows) would wait for itself forever.
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (comms == nullptr || ndev < 1) return ncclInvalidArgument;
  if (devlist != nullptr) {
    std::vector<int> devs(devlist, devlist + ndev);
    std::sort(devs.begin(), devs.end());
    if (devs.front() < 0 || std::adjacent_find(devs.begin(), devs.end()) != devs.end()) {
      return ncclInvalidArgument;
    }
  }
  auto group = std::make_shared<Group>(ndev);
  for (int r = 0; r < ndev; ++r) comms[r] = new ncclComm{group, r};
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (comm->group != nullptr) {
    std::lock_guard<std::mutex> lock(comm->group->mu);
    comm->group->aborted = true;
    comm->group->cv.notify_all();
  }
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (comm == nullptr || error == nullptr) return ncclInvalidArgument;
  *error = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = comm->group->size;
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t*) {
  if (comm == nullptr || newcomm == nullptr) return ncclInvalidArgument;
  Group& g = *comm->group;
  std::unique_lock<std::mutex> lock(g.mu);
  g.arrivals[static_cast<size_t>(comm->rank)].color = color;
  g.arrivals[static_cast<size_t>(comm->rank)].key = key;
  if (!g.Meet(lock)) return ncclSystemError;
  // Members of this rank's color, ordered by (key, parent rank).
  std::vector<std::pair<int, int>> members;
  for (int r = 0; r < g.size; ++r) {
    if (g.arrivals[static_cast<size_t>(r)].color == color) {
      members.push_back({g.arrivals[static_cast<size_t>(r)].key, r});
    }
  }
  std::sort(members.begin(), members.end());
  std::shared_ptr<Group> sub;
  if (color != NCCL_SPLIT_NOCOLOR) {
    auto& slot = g.split[color];
    if (slot == nullptr) slot = std::make_shared<Group>(static_cast<int>(members.size()));
    sub = slot;
  }
  if (!g.Meet(lock)) return ncclSystemError;  // every rank has its group
  g.split.clear();  // each rank cleared it after all took theirs: harmless repeats
  if (!g.Meet(lock)) return ncclSystemError;
  lock.unlock();
  if (sub == nullptr) {
    *newcomm = nullptr;
    return ncclSuccess;
  }
  int sub_rank = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].second == comm->rank) sub_rank = static_cast<int>(i);
  }
  *newcomm = new ncclComm{sub, sub_rank};
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;
  std::vector<P2p> ops;
  ops.swap(group_p2p);
  return RunP2p(std::move(ops));
}

// Kept for the group's end; outside a group, a group of one.
ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t) {
  if (TypeSize(type) == 0) return ncclInvalidArgument;
  ncclGroupStart();
  const ncclResult_t posted =
      P2pCall(P2p{.send = true, .comm = comm, .buf = const_cast<void*>(send),
                  .bytes = count * TypeSize(type), .peer = peer});
  const ncclResult_t ended = ncclGroupEnd();
  return posted != ncclSuccess ? posted : ended;
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t) {
  if (TypeSize(type) == 0) return ncclInvalidArgument;
  ncclGroupStart();
  const ncclResult_t posted = P2pCall(
      P2p{.send = false, .comm = comm, .buf = recv, .bytes = count * TypeSize(type), .peer = peer});
  const ncclResult_t ended = ncclGroupEnd();
  return posted != ncclSuccess ? posted : ended;
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t) {
  const size_t bytes = count * TypeSize(type);
  if (TypeSize(type) == 0) return ncclInvalidArgument;
  const size_t n = comm == nullptr ? 0 : static_cast<size_t>(comm->group->size);
  return Collective(comm, send, recv, bytes * n, [&](const std::vector<const void*>& s, char* out) {
    for (size_t r = 0; r < s.size(); ++r) std::memcpy(out + r * bytes, s[r], bytes);
    return ncclSuccess;
  });
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  if (TypeSize(type) == 0 || comm == nullptr) return ncclInvalidArgument;
  const size_t offset = static_cast<size_t>(comm->rank) * count;
  return Collective(comm, send, recv, count * TypeSize(type),
                    [&](const std::vector<const void*>& s, char* out) {
                      return Reduce(s, offset, count, type, op, out);
                    });
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  if (TypeSize(type) == 0) return ncclInvalidArgument;
  return Collective(comm, send, recv, count * TypeSize(type),
                    [&](const std::vector<const void*>& s, char* out) {
                      return Reduce(s, 0, count, type, op, out);
                    });
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t) {
  const size_t bytes = count * TypeSize(type);
  if (TypeSize(type) == 0 || comm == nullptr || root < 0 || root >= comm->group->size) {
    return ncclInvalidArgument;
  }
  return Collective(comm, send, recv, bytes, [&](const std::vector<const void*>& s, char* out) {
    std::memcpy(out, s[static_cast<size_t>(root)], bytes);
    return ncclSuccess;
  });
}

}  // extern "C"
