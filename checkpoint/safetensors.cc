#include "zeroshard/checkpoint/safetensors.h"

#include "zeroshard/checkpoint/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "zeroshard/runtime/status.h"

namespace zeroshard {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host needs byte swaps");

// Containers nested deeper than this in a header are refused: a valid header
// needs depth 3 (the object, an entry, its shape), unknown keys a little more.
constexpr int kMaxJsonDepth = 32;

// At most this many bytes per pread/write call (Linux moves at most ~2 GiB per call).
constexpr uint64_t kMaxIoChunk = uint64_t{1} << 30;

std::string Quoted(absl::string_view s) { return absl::StrCat("'", s, "'"); }

// Every fault of the file itself: "safetensors file 'x': <what>".
template <typename... Args>
absl::Status Corrupt(absl::string_view source, const Args&... args) {
  return absl::DataLossError(absl::StrCat("safetensors file ", Quoted(source), ": ", args...));
}

absl::Status ErrnoError(int err, absl::string_view what) {
  return absl::ErrnoToStatus(err, what);
}

uint64_t LoadLittleEndian64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));  // the host is little-endian (asserted above)
  return v;
}

// Dtypes the format defines that zeroshard does not hold.
constexpr absl::string_view kOtherFormatDTypes[] = {
    "BOOL", "U8", "I16", "U16", "U32", "U64", "F64", "F8_E5M2", "F8_E4M3", "F8_E8M0",
    "F4", "F6_E2M3", "F6_E3M2", "C64"};

// A JSON value, described for error messages: `the number -1`, `a string`.
std::string Describe(const nlohmann::json& v) {
  if (v.is_string()) return absl::StrCat("the string ", v.dump());
  if (v.is_number() || v.is_boolean() || v.is_null()) return absl::StrCat("the value ", v.dump());
  if (v.is_array()) return absl::StrCat("an array of ", v.size(), " elements");
  if (v.is_object()) return "an object";
  return std::string(v.type_name());
}

// Reads a non-negative integer that fits int64 (the limit of every size here).
absl::StatusOr<uint64_t> NonNegativeInt(const nlohmann::json& v, absl::string_view source,
                                        absl::string_view what) {
  if (!v.is_number_unsigned() || v.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()}) {
    return Corrupt(source, what, ": expected an integer in [0, 2^63), found ", Describe(v));
  }
  return v.get<uint64_t>();
}

absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name, const nlohmann::json& v,
                                            uint64_t data_size, absl::string_view source) {
  const std::string where = absl::StrCat("entry ", Quoted(name));
  if (!v.is_object()) {
    return Corrupt(source, where, ": expected an object with dtype, shape and data_offsets, found ",
                   Describe(v));
  }
  SafetensorsEntry e;
  e.name = name;

  auto dtype_it = v.find("dtype");
  if (dtype_it == v.end()) return Corrupt(source, where, ": missing \"dtype\"");
  if (!dtype_it->is_string()) {
    return Corrupt(source, where, ": \"dtype\" should be a string, found ", Describe(*dtype_it));
  }
  {
    const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
    absl::StatusOr<DType> dtype = ParseSafetensorsDType(dtype_name);
    if (!dtype.ok()) {
      return absl::Status(dtype.status().code(),
                          absl::StrCat("safetensors file ", Quoted(source), ": ", where, ": ",
                                       dtype.status().message()));
    }
    e.dtype = *dtype;
  }

  auto shape_it = v.find("shape");
  if (shape_it == v.end()) return Corrupt(source, where, ": missing \"shape\"");
  if (!shape_it->is_array()) {
    return Corrupt(source, where, ": \"shape\" should be an array, found ", Describe(*shape_it));
  }
  // `extent`: the product of the dimensions with zeros counted as 1, which is
  // what a tensor's contiguous strides multiply up to (ContiguousStrides). It
  // must fit int64 even when a zero dimension leaves no elements: [0, 2^62, 4]
  // holds no bytes, but its strides overflowed. numel is the product proper.
  int64_t extent = 1;
  bool extent_overflows = false, has_zero = false;
  for (size_t d = 0; d < shape_it->size(); ++d) {
    ZS_ASSIGN_OR_RETURN(uint64_t size, NonNegativeInt((*shape_it)[d], source,
                                                      absl::StrCat(where, ": shape[", d, "]")));
    e.shape.push_back(static_cast<int64_t>(size));
    has_zero |= size == 0;
    if (size > 0 && __builtin_mul_overflow(extent, static_cast<int64_t>(size), &extent)) extent_overflows = true;
  }
  if (extent_overflows && has_zero) {
    return Corrupt(source, where, ": shape ", ShapeToString(e.shape),
                   " has no elements, but the product of its other dimensions overflows int64 (its strides "
                   "cannot be represented)");
  }
  const bool numel_overflows = extent_overflows;
  const uint64_t numel = has_zero ? 0 : static_cast<uint64_t>(extent);

  auto offsets_it = v.find("data_offsets");
  if (offsets_it == v.end()) return Corrupt(source, where, ": missing \"data_offsets\"");
  if (!offsets_it->is_array() || offsets_it->size() != 2) {
    return Corrupt(source, where, ": \"data_offsets\" should be an array [begin, end], found ",
                   Describe(*offsets_it));
  }
  ZS_ASSIGN_OR_RETURN(e.data_begin,
                      NonNegativeInt((*offsets_it)[0], source, absl::StrCat(where, ": data_offsets[0]")));
  ZS_ASSIGN_OR_RETURN(e.data_end,
                      NonNegativeInt((*offsets_it)[1], source, absl::StrCat(where, ": data_offsets[1]")));
  if (e.data_begin > e.data_end) {
    return Corrupt(source, where, ": data_offsets [", e.data_begin, ", ", e.data_end,
                   "] are out of order (expected begin <= end)");
  }
  if (e.data_end > data_size) {
    return Corrupt(source, where, ": data_offsets [", e.data_begin, ", ", e.data_end,
                   "] extend past the end of the data section (", data_size,
                   " bytes); is the file truncated?");
  }

  const uint64_t itemsize = DTypeSize(e.dtype);
  uint64_t expected_bytes = 0;
  if (numel_overflows || __builtin_mul_overflow(numel, itemsize, &expected_bytes)) {
    return Corrupt(source, where, ": shape ", ShapeToString(e.shape),
                   " has more elements than any file can hold");
  }
  if (expected_bytes != e.nbytes()) {
    return Corrupt(source, where, ": shape ", ShapeToString(e.shape), " of ",
                   SafetensorsDTypeName(e.dtype), " needs ", numel, " * ", itemsize, " = ",
                   expected_bytes, " bytes, but data_offsets [", e.data_begin, ", ", e.data_end,
                   "] hold ", e.nbytes());
  }
  return e;
}

}  // namespace

// ---------------------------------------------------------------- dtypes

absl::string_view SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kI8: return "I8";
  }
  return "?";
}

absl::StatusOr<DType> ParseSafetensorsDType(absl::string_view name) {
  for (DType d : kAllDTypes) {
    if (name == SafetensorsDTypeName(d)) return d;
  }
  for (absl::string_view other : kOtherFormatDTypes) {
    if (name == other) {
      return absl::UnimplementedError(
          absl::StrCat("dtype \"", name,
                       "\" is a safetensors dtype zeroshard does not support (expected one of "
                       "F32, BF16, F16, I32, I64, I8)"));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", name, "\" (expected one of F32, BF16, F16, I32, I64, I8)"));
}

// ---------------------------------------------------------------- header

std::string SafetensorsEntry::DebugString() const {
  return absl::StrCat(name, ": ", SafetensorsDTypeName(dtype), " ", ShapeToString(shape),
                      " bytes [", data_begin, ", ", data_end, ")");
}

const SafetensorsEntry* SafetensorsHeader::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries[it->second];
}

absl::StatusOr<uint64_t> ParseSafetensorsHeaderSize(absl::string_view prefix, uint64_t file_size,
                                                    absl::string_view source) {
  if (file_size >= 8 && prefix.size() < 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ParseSafetensorsHeaderSize(", Quoted(source), "): given ", prefix.size(),
        " bytes; pass the first 8 bytes of the file"));
  }
  if (file_size < 8) {
    return Corrupt(source, "the file is ", file_size,
                   " bytes, shorter than the 8-byte header size; is it truncated?");
  }
  const uint64_t n = LoadLittleEndian64(prefix.data());
  if (n < 2) {
    return Corrupt(source, "the header size is ", n, " bytes (expected at least 2, for \"{}\")");
  }
  if (n > kMaxSafetensorsHeaderSize) {
    return Corrupt(source, "the header size is ", n, " bytes, more than the limit of ",
                   kMaxSafetensorsHeaderSize, "; is this a safetensors file?");
  }
  if (n > file_size - 8) {
    return Corrupt(source, "the header size is ", n, " bytes but only ", file_size - 8,
                   " bytes follow the 8-byte prefix; is the file truncated?");
  }
  return n;
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view bytes,
                                                         uint64_t file_size,
                                                         absl::string_view source) {
  if (bytes.size() > file_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("ParseSafetensorsHeader(", Quoted(source), "): given ", bytes.size(),
                     " bytes of a file said to be ", file_size, " bytes"));
  }
  ZS_ASSIGN_OR_RETURN(const uint64_t n, ParseSafetensorsHeaderSize(bytes, file_size, source));
  if (bytes.size() - 8 < n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ParseSafetensorsHeader(", Quoted(source), "): the header is ", n, " bytes but only ",
        bytes.size() - 8, " were given after the prefix (pass at least the first 8 + N bytes)"));
  }
  const absl::string_view text = bytes.substr(8, n);
  if (text[0] != '{') {
    return Corrupt(source, "the header should start with '{', found byte 0x",
                   absl::Hex(static_cast<unsigned char>(text[0]), absl::kZeroPad2));
  }

  // Valid JSON never holds a raw NUL, and nlohmann would take one as the end of
  // its input, accepting whatever follows it.
  if (const size_t nul = text.find('\0'); nul != absl::string_view::npos) {
    return Corrupt(source, "the header is not valid JSON: a NUL byte at header offset ", nul);
  }

  // Duplicate keys and runaway nesting are caught while parsing; nlohmann would
  // otherwise keep the last of two equal keys silently.
  std::vector<absl::flat_hash_set<std::string>> keys_per_level;
  std::string duplicate;
  bool too_deep = false;
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        if (depth >= kMaxJsonDepth) too_deep = true;
        if (event == E::object_start) keys_per_level.emplace_back();
        return !too_deep;
      case E::object_end:
        if (!keys_per_level.empty()) keys_per_level.pop_back();
        return true;
      case E::key:
        if (!keys_per_level.empty() && parsed.is_string() &&
            !keys_per_level.back().insert(parsed.get_ref<const std::string&>()).second &&
            duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        return true;
      default:
        return true;
    }
  };
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::exception& ex) {
    return Corrupt(source, "the header is not valid JSON: ", ex.what());
  }
  if (too_deep) {
    return Corrupt(source, "the header nests JSON deeper than ", kMaxJsonDepth, " levels");
  }
  if (!duplicate.empty()) {
    return Corrupt(source, "the header has the key ", Quoted(duplicate),
                   " twice in one object (duplicate keys are not allowed)");
  }
  if (!root.is_object()) {
    return Corrupt(source, "the header should be a JSON object, found ", Describe(root));
  }

  SafetensorsHeader header;
  header.header_size = n;
  header.data_offset = 8 + n;
  header.data_size = file_size - header.data_offset;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) {
        return Corrupt(source, "__metadata__ should be an object of strings, found ",
                       Describe(it.value()));
      }
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) {
          return Corrupt(source, "__metadata__ value of ", Quoted(m.key()),
                         " should be a string, found ", Describe(m.value()));
        }
        header.metadata.emplace(m.key(), m.value().get<std::string>());
      }
      continue;
    }
    ZS_ASSIGN_OR_RETURN(SafetensorsEntry e, ParseEntry(it.key(), it.value(), header.data_size, source));
    header.entries.push_back(std::move(e));
  }

  // The entries must tile the data section: see Note [Safetensors validation].
  std::sort(header.entries.begin(), header.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return std::tie(a.data_begin, a.data_end, a.name) <
                     std::tie(b.data_begin, b.data_end, b.name);
            });
  uint64_t expected_begin = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& e : header.entries) {
    if (e.data_begin < expected_begin) {
      return Corrupt(source, "entry ", Quoted(e.name), " (bytes [", e.data_begin, ", ",
                     e.data_end, ")) overlaps entry ", Quoted(previous->name), " (bytes [",
                     previous->data_begin, ", ", previous->data_end, "))");
    }
    if (e.data_begin > expected_begin) {
      return Corrupt(source, "the data section has a hole: bytes [", expected_begin, ", ",
                     e.data_begin, ") belong to no entry (entry ", Quoted(e.name),
                     " begins at ", e.data_begin, "; expected ", expected_begin, ")");
    }
    expected_begin = e.data_end;
    previous = &e;
  }
  if (expected_begin != header.data_size) {
    return Corrupt(source, "the entries cover ", expected_begin,
                   " bytes of the data section but the file holds ", header.data_size,
                   " (bytes [", expected_begin, ", ", header.data_size,
                   ") belong to no entry)");
  }
  for (size_t i = 0; i < header.entries.size(); ++i) {
    header.index_.emplace(header.entries[i].name, i);
  }
  return header;
}

// ---------------------------------------------------------------- reader

SafetensorsFile::SafetensorsFile(std::string path, int fd, uint64_t file_size,
                                 SafetensorsHeader header)
    : path_(std::move(path)), fd_(fd), file_size_(file_size), header_(std::move(header)) {}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      file_size_(other.file_size_),
      header_(std::move(other.header_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    file_size_ = other.file_size_;
    header_ = std::move(other.header_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

// pread exactly `nbytes` at `offset`; `eof` is called to describe a short read.
absl::Status PreadAll(int fd, void* dst, uint64_t nbytes, uint64_t offset,
                      absl::string_view path, absl::string_view what) {
  char* p = static_cast<char*>(dst);
  while (nbytes > 0) {
    const size_t chunk = static_cast<size_t>(std::min(nbytes, kMaxIoChunk));
    const ssize_t got = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, absl::StrCat("reading ", what, " of ", Quoted(path), " at byte ",
                                            offset));
    }
    if (got == 0) {
      return Corrupt(path, "the file ended at byte ", offset, " while reading ", what,
                     "; did it shrink after it was opened?");
    }
    p += got;
    offset += static_cast<uint64_t>(got);
    nbytes -= static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  // O_NONBLOCK: a FIFO in the file's place would block open(2) until a writer
  // came, i.e. forever; with it the open returns and the fstat below refuses
  // the FIFO. Reads of a regular file ignore the flag.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoError(errno, absl::StrCat("opening safetensors file ", Quoted(path)));
  // From here on the descriptor belongs to `file`, which closes it on any return.
  SafetensorsFile file(path, fd, 0, SafetensorsHeader{});
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoError(errno, absl::StrCat("fstat of ", Quoted(path)));
  if (!S_ISREG(st.st_mode)) return Corrupt(path, "not a regular file");
  file.file_size_ = static_cast<uint64_t>(st.st_size);

  char prefix[8];
  if (file.file_size_ >= 8) {
    ZS_RETURN_IF_ERROR(PreadAll(fd, prefix, 8, 0, path, "the header size"));
  }
  ZS_ASSIGN_OR_RETURN(const uint64_t n,
                      ParseSafetensorsHeaderSize(absl::string_view(prefix, file.file_size_ >= 8 ? 8 : 0),
                                                 file.file_size_, path));
  // n <= file size - 8 and <= kMaxSafetensorsHeaderSize here.
  std::string bytes(8 + n, '\0');
  std::memcpy(bytes.data(), prefix, 8);
  ZS_RETURN_IF_ERROR(PreadAll(fd, bytes.data() + 8, n, 8, path, "the header"));
  ZS_ASSIGN_OR_RETURN(file.header_, ParseSafetensorsHeader(bytes, file.file_size_, path));
  return file;
}

absl::StatusOr<const SafetensorsEntry*> SafetensorsFile::Find(absl::string_view name) const {
  if (const SafetensorsEntry* e = header_.Find(name)) return e;
  std::vector<absl::string_view> some;
  for (size_t i = 0; i < entries().size() && i < 8; ++i) some.push_back(entries()[i].name);
  return absl::NotFoundError(absl::StrCat(
      "safetensors file ", Quoted(path_), " has no entry ", Quoted(name), " (it has ",
      entries().size(), " entries", some.empty() ? "" : ": ", absl::StrJoin(some, ", "),
      entries().size() > some.size() ? ", ..." : "", ")"));
}

absl::Status SafetensorsFile::PreadExact(void* dst, uint64_t nbytes, uint64_t offset,
                                         const SafetensorsEntry& entry) const {
  return PreadAll(fd_, dst, nbytes, offset, path_, absl::StrCat("entry ", Quoted(entry.name)));
}

absl::StatusOr<Tensor> SafetensorsFile::Read(absl::string_view name, Allocator* allocator) const {
  ZS_ASSIGN_OR_RETURN(const SafetensorsEntry* e, Find(name));
  if (allocator != nullptr && !allocator->device().is_cpu()) {
    ZS_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty(e->shape, e->dtype));
    ZS_RETURN_IF_ERROR(ReadRangeImpl(*e, 0, e->numel(), host));
    return host.To(allocator);
  }
  ZS_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(e->shape, e->dtype, allocator));
  ZS_RETURN_IF_ERROR(ReadRangeImpl(*e, 0, e->numel(), out));
  return out;
}

absl::Status SafetensorsFile::ReadInto(absl::string_view name, const Tensor& out) const {
  ZS_ASSIGN_OR_RETURN(const SafetensorsEntry* e, Find(name));
  if (!out.defined() || out.shape() != e->shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ReadInto: entry ", Quoted(name), " of ", Quoted(path_), " has shape ",
        ShapeToString(e->shape), " but the output tensor has ",
        out.defined() ? ShapeToString(out.shape()) : std::string("no shape (undefined)")));
  }
  return ReadRangeImpl(*e, 0, e->numel(), out);
}

absl::Status SafetensorsFile::ReadRange(absl::string_view name, int64_t element_offset,
                                        int64_t count, const Tensor& out) const {
  ZS_ASSIGN_OR_RETURN(const SafetensorsEntry* e, Find(name));
  return ReadRangeImpl(*e, element_offset, count, out);
}

absl::Status SafetensorsFile::ReadRangeImpl(const SafetensorsEntry& entry, int64_t element_offset,
                                            int64_t count, const Tensor& out) const {
  const int64_t numel = entry.numel();
  if (element_offset < 0 || count < 0 || element_offset > numel || count > numel - element_offset) {
    // (element_offset + count is not printed: it may overflow.)
    return absl::OutOfRangeError(absl::StrCat(
        "reading ", count, " elements from element ", element_offset, " of entry ",
        Quoted(entry.name), " of ", Quoted(path_), ": it has ", numel, " elements (shape ",
        ShapeToString(entry.shape), ")"));
  }
  if (!out.defined()) {
    return absl::InvalidArgumentError(absl::StrCat("reading entry ", Quoted(entry.name), " of ",
                                                   Quoted(path_), ": the output is undefined"));
  }
  if (out.numel() != count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reading ", count, " elements of entry ", Quoted(entry.name), " of ", Quoted(path_),
        " into an output of ", out.numel(), " elements (shape ", ShapeToString(out.shape()), ")"));
  }
  if (IsFloatingPoint(out.dtype()) != IsFloatingPoint(entry.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reading entry ", Quoted(entry.name), " of ", Quoted(path_), ": it holds ",
        SafetensorsDTypeName(entry.dtype), ", the output is ", DTypeName(out.dtype()),
        " (conversion between floating and integer dtypes is refused)"));
  }
  if (out.has_internal_overlap()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reading entry ", Quoted(entry.name), " of ", Quoted(path_),
        ": the output has a stride-0 dimension (", out.DebugString(), ")"));
  }
  if (count == 0) return absl::OkStatus();

  const uint64_t itemsize = DTypeSize(entry.dtype);
  const uint64_t offset = header_.data_offset + entry.data_begin +
                          static_cast<uint64_t>(element_offset) * itemsize;
  const uint64_t nbytes = static_cast<uint64_t>(count) * itemsize;
  if (out.device().is_cpu() && out.is_contiguous() && out.dtype() == entry.dtype) {
    return PreadExact(out.raw_data(), nbytes, offset, entry);
  }
  // Staged: read the bytes as they are, then convert/scatter/upload with CopyFrom.
  ZS_ASSIGN_OR_RETURN(Tensor staging, Tensor::Empty({count}, entry.dtype));
  ZS_RETURN_IF_ERROR(PreadExact(staging.raw_data(), nbytes, offset, entry));
  ZS_ASSIGN_OR_RETURN(Tensor shaped, staging.View(out.shape()));
  return out.CopyFrom(shaped);
}

// ---------------------------------------------------------------- writer

namespace {

// Receives the bytes of a file in order.
using ByteSink = std::function<absl::Status(const void* data, size_t nbytes)>;

absl::Status CheckTensors(const SafetensorsTensors& tensors) {
  absl::flat_hash_set<absl::string_view> seen;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    if (name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors entry ", i, " has an empty name"));
    }
    if (name == "__metadata__") {
      return absl::InvalidArgumentError(
          "a tensor may not be named '__metadata__' (the format reserves it)");
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors entry ", Quoted(name), " appears twice (entries ", i, " and an earlier one)"));
    }
    if (!t.defined()) {
      return absl::InvalidArgumentError(absl::StrCat("safetensors entry ", Quoted(name), " is an undefined tensor"));
    }
  }
  return absl::OkStatus();
}

// Streams the header, then every tensor's elements, contiguous and on the host.
absl::Status WriteTo(const ByteSink& sink, const SafetensorsTensors& tensors,
                     const std::map<std::string, std::string>& metadata) {
  ZS_ASSIGN_OR_RETURN(const std::string header, BuildSafetensorsHeader(tensors, metadata));
  ZS_RETURN_IF_ERROR(sink(header.data(), header.size()));
  for (const auto& [name, tensor] : tensors) {
    if (tensor.numel() == 0) continue;
    Tensor t = tensor;
    if (!t.device().is_cpu()) {
      ZS_ASSIGN_OR_RETURN(t, t.To(DefaultCpuAllocator()));
    }
    if (!t.is_contiguous()) {
      ZS_ASSIGN_OR_RETURN(t, t.Contiguous());
    }
    ZS_RETURN_IF_ERROR(sink(t.raw_data(), t.nbytes()));
  }
  return absl::OkStatus();
}


}  // namespace

absl::StatusOr<std::string> BuildSafetensorsHeader(
    const SafetensorsTensors& tensors, const std::map<std::string, std::string>& metadata) {
  ZS_RETURN_IF_ERROR(CheckTensors(tensors));
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    root["__metadata__"] = std::move(m);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = std::string(SafetensorsDTypeName(t.dtype()));
    nlohmann::ordered_json shape = nlohmann::ordered_json::array();
    for (int64_t s : t.shape()) shape.push_back(s);
    e["shape"] = std::move(shape);
    e["data_offsets"] = {offset, offset + t.nbytes()};
    offset += t.nbytes();
    root[name] = std::move(e);
  }
  std::string text;
  try {
    text = root.dump();
  } catch (const nlohmann::json::exception& ex) {
    return absl::InvalidArgumentError(
        absl::StrCat("a safetensors name or metadata string is not valid UTF-8: ", ex.what()));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(out.data(), &n, 8);  // little-endian host
  out += text;
  return out;
}

absl::StatusOr<std::string> SerializeSafetensors(
    const SafetensorsTensors& tensors, const std::map<std::string, std::string>& metadata) {
  std::string out;
  ZS_RETURN_IF_ERROR(WriteTo(
      [&](const void* data, size_t nbytes) {
        out.append(static_cast<const char*>(data), nbytes);
        return absl::OkStatus();
      },
      tensors, metadata));
  return out;
}

absl::Status WriteSafetensors(const std::string& path, const SafetensorsTensors& tensors,
                              const std::map<std::string, std::string>& metadata,
                              const SafetensorsWriteOptions& options) {
  // Refuse bad input before touching the disk.
  ZS_RETURN_IF_ERROR(CheckTensors(tensors));
  const std::string where = absl::StrCat("WriteSafetensors(", Quoted(path), ")");
  ZS_ASSIGN_OR_RETURN(AtomicFileWriter file,
                      AtomicFileWriter::Open(path, {.fsync = options.fsync,
                                                    .fail_after_bytes = options.fail_after_bytes},
                                             where));
  ZS_RETURN_IF_ERROR(WriteTo([&](const void* data, size_t nbytes) { return file.Write(data, nbytes); },
                             tensors, metadata));
  return file.Commit();
}

}  // namespace zeroshard
