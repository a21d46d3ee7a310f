#include "zeroshard/collectives/env_rendezvous.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {
namespace {

// ------------------------------------------------------------ environment

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : nullptr;
}

// The first of `names` that is set, as an integer in [lo, hi]; `fallback`
// when none is (InvalidArgument when `fallback` is null).
absl::StatusOr<int> IntVar(std::initializer_list<const char*> names, int lo, int hi, std::optional<int> fallback) {
  for (const char* name : names) {
    const char* v = Env(name);
    if (v == nullptr) continue;
    int x = 0;
    if (!absl::SimpleAtoi(v, &x) || x < lo || x > hi) {
      return absl::InvalidArgumentError(absl::StrCat("environment variable ", name, ": expected an integer in [", lo,
                                                     ", ", hi, "], found \"", v, "\""));
    }
    return x;
  }
  if (fallback) return *fallback;
  return absl::InvalidArgumentError(
      absl::StrCat("expected environment variable ", absl::StrJoin(names, " or "), " (the torchrun / Slurm launch "
                   "convention, docs/launch.md), found none set"));
}

// ------------------------------------------------------------ sockets

constexpr char kMagic[8] = {'Z', 'S', 'R', 'D', 'V', '0', '0', '1'};
constexpr uint32_t kMaxToken = 4096;
constexpr uint32_t kMaxPayload = 1 << 20;
// A connection that has not said who it is after this long is dropped (rank
// 0 serves one connection's hello at a time only as fast as it arrives).
constexpr absl::Duration kHelloLimit = absl::Seconds(10);

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  ~Fd() { Reset(); }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

int PollMs(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1000));
}

// Writes all of `data` (blocking socket with a send timeout).
bool SendAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads exactly `n` bytes before `deadline`.
absl::Status RecvAll(int fd, void* data, size_t n, absl::Time deadline, const std::string& what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, PollMs(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      if (absl::Now() >= deadline) return absl::DeadlineExceededError(what);
      continue;
    }
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return absl::UnavailableError(absl::StrCat(what, ": the connection closed"));
    p += r;
    n -= static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

void SendReply(int fd, char kind, const std::string& body) {
  const uint32_t len = htonl(static_cast<uint32_t>(body.size()));
  (void)(SendAll(fd, &kind, 1) && SendAll(fd, &len, 4) && SendAll(fd, body.data(), body.size()));
}

bool SameToken(const std::string& a, const std::string& b) {
  // Constant time in the contents (the length is not secret).
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string Where(const EnvLaunch& env) { return absl::StrCat(env.master_addr, ":", env.master_port); }

// ------------------------------------------------------------ rank 0

absl::StatusOr<Fd> Listen(const EnvLaunch& env) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  const std::string port = std::to_string(env.master_port);
  std::vector<std::pair<const char*, std::string>> tries = {{env.master_addr.c_str(), "MASTER_ADDR"},
                                                            {nullptr, "every interface"}};
  std::string errors;
  for (const auto& [host, what] : tries) {
    addrinfo* res = nullptr;
    if (::getaddrinfo(host, port.c_str(), &hints, &res) != 0) continue;
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (fd.get() < 0) continue;
      const int one = 1;
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd.get(), 128) == 0) {
        ::freeaddrinfo(res);
        ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) | O_NONBLOCK);
        return fd;
      }
      const int err = errno;
      absl::StrAppend(&errors, errors.empty() ? "" : "; ", what, ": ", std::strerror(err));
      if (err == EADDRINUSE) {
        ::freeaddrinfo(res);
        return absl::FailedPreconditionError(absl::StrCat(
            "env rendezvous: rank 0 cannot listen on ", Where(env), ": the port is in use (MASTER_PORT: pick a free "
            "one, or an earlier run of this job still holds it)"));
      }
    }
    ::freeaddrinfo(res);
  }
  return absl::UnavailableError(
      absl::StrCat("env rendezvous: rank 0 cannot listen on ", Where(env), " (MASTER_ADDR, MASTER_PORT): ", errors));
}

struct Pending {
  Fd fd;
  absl::Time since;
  std::string got;  // the hello so far
};

// The hello's parts once `got` holds all of it: true when complete.
bool ParseHello(const std::string& got, int* rank, int* world, std::string* token, bool* malformed) {
  *malformed = false;
  if (got.size() < 20) return false;
  if (std::memcmp(got.data(), kMagic, 8) != 0) {
    *malformed = true;
    return true;
  }
  uint32_t r, w, n;
  std::memcpy(&r, got.data() + 8, 4);
  std::memcpy(&w, got.data() + 12, 4);
  std::memcpy(&n, got.data() + 16, 4);
  r = ntohl(r);
  w = ntohl(w);
  n = ntohl(n);
  if (n > kMaxToken) {
    *malformed = true;
    return true;
  }
  if (got.size() < 20 + n) return false;
  *rank = static_cast<int>(r);
  *world = static_cast<int>(w);
  token->assign(got.data() + 20, n);
  return true;
}

absl::StatusOr<std::string> Serve(const EnvLaunch& env, const std::string& payload, absl::Duration timeout) {
  absl::StatusOr<Fd> listening = Listen(env);
  if (!listening.ok()) return listening.status();
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<Pending> pending;
  std::map<int, Fd> joined;  // rank -> its connection, held until the end
  while (static_cast<int>(joined.size()) < env.world_size - 1) {
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      std::vector<int> missing;
      for (int r = 1; r < env.world_size; ++r) {
        if (!joined.count(r)) missing.push_back(r);
      }
      const std::string message = absl::StrCat(
          "env rendezvous: rank", missing.size() > 1 ? "s " : " ", absl::StrJoin(missing, ", "), " of ",
          env.world_size, " never arrived at ", Where(env), " within ", absl::FormatDuration(timeout),
          " (each process needs RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and the job's ZEROSHARD_JOB_TOKEN; "
          "see docs/launch.md)");
      for (auto& [r, fd] : joined) SendReply(fd.get(), 'T', message);
      return absl::DeadlineExceededError(message);
    }
    // Drop hellos that take too long.
    for (auto it = pending.begin(); it != pending.end();) {
      it = now - it->since > kHelloLimit ? pending.erase(it) : it + 1;
    }
    std::vector<pollfd> fds = {{listening->get(), POLLIN, 0}};
    for (const Pending& p : pending) fds.push_back({p.fd.get(), POLLIN, 0});
    const int ready = ::poll(fds.data(), fds.size(), PollMs(deadline));
    if (ready <= 0) continue;
    if (fds[0].revents & POLLIN) {
      while (true) {
        const int c = ::accept4(listening->get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) break;
        const timeval tv{5, 0};  // replies are small: a peer that stops reading does not stall us
        ::setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        pending.push_back(Pending{Fd(c), absl::Now(), ""});
      }
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Pending& p = pending[i - 1];
      char buf[4096];
      const ssize_t r = ::recv(p.fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
      if (r <= 0) {
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        p.fd.Reset();  // closed before saying who it is
        continue;
      }
      p.got.append(buf, static_cast<size_t>(r));
      int rank = -1, world = -1;
      std::string token;
      bool malformed = false;
      if (!ParseHello(p.got, &rank, &world, &token, &malformed)) continue;
      if (malformed) {
        SendReply(p.fd.get(), 'E', "env rendezvous: rank 0 expected a zeroshard rendezvous hello, found other bytes");
      } else if (!SameToken(token, env.token)) {
        // The token is never echoed or described beyond this.
        SendReply(p.fd.get(), 'R', absl::StrCat("env rendezvous: rank 0 at ", Where(env), " refused rank ", rank,
                                                ": its ZEROSHARD_JOB_TOKEN is not this job's"));
      } else if (world != env.world_size || rank < 1 || rank >= env.world_size) {
        SendReply(p.fd.get(), 'E', absl::StrCat("env rendezvous: rank 0 of WORLD_SIZE ", env.world_size,
                                                " expected a rank in [1, ", env.world_size - 1, "], found rank ", rank,
                                                " of WORLD_SIZE ", world));
      } else if (joined.count(rank)) {
        SendReply(p.fd.get(), 'E', absl::StrCat("env rendezvous: rank ", rank,
                                                " arrived twice: expected each RANK once in the job"));
      } else {
        joined[rank] = std::move(p.fd);
      }
      p.fd.Reset();
    }
    for (auto it = pending.begin(); it != pending.end();) it = it->fd.get() < 0 ? pending.erase(it) : it + 1;
  }
  listening->Reset();  // the port closes as soon as the group has formed
  for (auto& [r, fd] : joined) SendReply(fd.get(), 'K', payload);
  return payload;
}

// ------------------------------------------------------------ the others

absl::StatusOr<Fd> Connect(const EnvLaunch& env, absl::Time deadline, std::string* last_error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(env.master_addr.c_str(), std::to_string(env.master_port).c_str(), &hints, &res);
  if (gai != 0) {
    *last_error = absl::StrCat("resolving MASTER_ADDR ", env.master_addr, ": ", gai_strerror(gai));
    return absl::UnavailableError(*last_error);
  }
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (fd.get() < 0) continue;
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      *last_error = std::strerror(errno);
      continue;
    }
    pollfd pfd{fd.get(), POLLOUT, 0};
    if (::poll(&pfd, 1, std::min(PollMs(deadline), 1000)) <= 0) {
      *last_error = "no answer";
      continue;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      *last_error = std::strerror(err);
      continue;
    }
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
    ::freeaddrinfo(res);
    return fd;
  }
  ::freeaddrinfo(res);
  return absl::UnavailableError(*last_error);
}

absl::StatusOr<std::string> Join(const EnvLaunch& env, absl::Duration timeout) {
  const absl::Time connect_deadline = absl::Now() + timeout;
  std::string last_error = "no attempt";
  absl::StatusOr<Fd> fd = absl::UnavailableError("");
  while (true) {
    fd = Connect(env, connect_deadline, &last_error);
    if (fd.ok()) break;
    if (absl::Now() >= connect_deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "env rendezvous: rank ", env.rank, " waited ", absl::FormatDuration(timeout), " for rank 0 to listen at ",
          Where(env), " (MASTER_ADDR, MASTER_PORT; last attempt: ", last_error,
          "): rank 0 never arrived, or MASTER_ADDR/MASTER_PORT differ between the processes"));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  const timeval tv{5, 0};
  ::setsockopt(fd->get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string hello(kMagic, 8);
  for (uint32_t v : {static_cast<uint32_t>(env.rank), static_cast<uint32_t>(env.world_size),
                     static_cast<uint32_t>(env.token.size())}) {
    const uint32_t n = htonl(v);
    hello.append(reinterpret_cast<const char*>(&n), 4);
  }
  hello += env.token;
  if (!SendAll(fd->get(), hello.data(), hello.size())) {
    return absl::UnavailableError(absl::StrCat("env rendezvous: rank ", env.rank, " could not send its hello to ",
                                               Where(env), ": ", std::strerror(errno)));
  }
  // Rank 0 answers when every rank has come or at its own deadline, which is
  // at most `timeout` after this connection (it listened before we
  // connected); 30 s more for a loaded machine.
  const absl::Time deadline = absl::Now() + timeout + absl::Seconds(30);
  const std::string what = absl::StrCat("env rendezvous: rank ", env.rank, " waiting for rank 0's answer at ",
                                        Where(env));
  char kind = 0;
  uint32_t len = 0;
  if (absl::Status s = RecvAll(fd->get(), &kind, 1, deadline, what); !s.ok()) return s;
  if (absl::Status s = RecvAll(fd->get(), &len, 4, deadline, what); !s.ok()) return s;
  len = ntohl(len);
  if (len > kMaxPayload) return absl::DataLossError(absl::StrCat(what, ": an answer of ", len, " bytes"));
  std::string body(len, '\0');
  if (absl::Status s = RecvAll(fd->get(), body.data(), len, deadline, what); !s.ok()) return s;
  switch (kind) {
    case 'K':
      return body;
    case 'R':
      return absl::PermissionDeniedError(body);
    case 'T':
      return absl::DeadlineExceededError(absl::StrCat(body, " (rank 0 said so to rank ", env.rank, ")"));
    default:
      return absl::InvalidArgumentError(body);
  }
}

}  // namespace

std::string EnvLaunch::ToString() const {
  std::string s = absl::StrCat("rank ", rank, " of ", world_size, " (local rank ", local_rank);
  if (local_world_size > 0) absl::StrAppend(&s, " of ", local_world_size);
  absl::StrAppend(&s, "), rendezvous ");
  if (!rendezvous_file.empty()) {
    absl::StrAppend(&s, "file ", rendezvous_file, " (job ", job_id.empty() ? "unnamed" : job_id, ")");
  } else {
    absl::StrAppend(&s, master_addr, ":", master_port);
  }
  return s;
}

absl::StatusOr<std::optional<EnvLaunch>> EnvLaunchFromEnvironment() {
  const bool torch = Env("RANK") != nullptr || Env("WORLD_SIZE") != nullptr;
  const bool slurm = Env("SLURM_PROCID") != nullptr && Env("SLURM_NTASKS") != nullptr;
  if (!torch && !slurm) return std::optional<EnvLaunch>();
  EnvLaunch e;
  ZS_ASSIGN_OR_RETURN(e.world_size, torch ? IntVar({"WORLD_SIZE"}, 1, 1 << 20, std::nullopt)
                                          : IntVar({"SLURM_NTASKS"}, 1, 1 << 20, std::nullopt));
  ZS_ASSIGN_OR_RETURN(e.rank, torch ? IntVar({"RANK"}, 0, e.world_size - 1, std::nullopt)
                                    : IntVar({"SLURM_PROCID"}, 0, e.world_size - 1, std::nullopt));
  ZS_ASSIGN_OR_RETURN(e.local_rank, IntVar({"LOCAL_RANK", "SLURM_LOCALID"}, 0, 1 << 16, std::nullopt));
  ZS_ASSIGN_OR_RETURN(e.local_world_size, IntVar({"LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"}, 1, 1 << 16, -1));
  if (const char* file = Env("ZEROSHARD_RENDEZVOUS_FILE")) {
    e.rendezvous_file = file;
    if (const char* id = Env("ZEROSHARD_JOB_ID")) {
      e.job_id = id;
    } else if (const char* id = Env("TORCHELASTIC_RUN_ID")) {
      e.job_id = id;
    } else if (const char* id = Env("SLURM_JOB_ID")) {
      e.job_id = absl::StrCat(id, ".", Env("SLURM_STEP_ID") != nullptr ? Env("SLURM_STEP_ID") : "0");
    }
    return std::optional<EnvLaunch>(e);
  }
  if (Env("MASTER_ADDR") == nullptr) {
    return absl::InvalidArgumentError(
        "expected environment variable MASTER_ADDR (rank 0's host) or ZEROSHARD_RENDEZVOUS_FILE, found neither set");
  }
  e.master_addr = Env("MASTER_ADDR");
  ZS_ASSIGN_OR_RETURN(e.master_port, IntVar({"MASTER_PORT"}, 1, 65535, std::nullopt));
  if (e.world_size > 1) {
    const char* token = Env("ZEROSHARD_JOB_TOKEN");
    if (token == nullptr) {
      return absl::InvalidArgumentError(
          "expected environment variable ZEROSHARD_JOB_TOKEN (a secret the launcher makes for this job and gives "
          "every process, e.g. $(head -c 16 /dev/urandom | xxd -p)): rank 0 hands the NCCL id only to processes "
          "that present it; found it unset");
    }
    e.token = token;
  }
  return std::optional<EnvLaunch>(e);
}

absl::StatusOr<std::string> TcpRendezvous(const EnvLaunch& env, const std::string& payload, absl::Duration timeout) {
  if (env.world_size == 1) return payload;
  if (env.rank == 0) {
    if (payload.size() > kMaxPayload) {
      return absl::InvalidArgumentError(absl::StrCat("TcpRendezvous: a payload of at most ", kMaxPayload,
                                                     " bytes, found ", payload.size()));
    }
    return Serve(env, payload, timeout);
  }
  return Join(env, timeout);
}

}  // namespace zeroshard
