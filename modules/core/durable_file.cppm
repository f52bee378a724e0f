// Writing files so that a crash, a full disk or a concurrent writer never leaves a reader a
// half-written file: contents go to a temporary sibling that is fsynced, renamed over the
// target, and the folder fsynced, so the rename itself survives a power loss. Every writer
// of kvlab files (npy, safetensors, GGUF, tables, result cells) commits through here.
module;
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <unistd.h>
export module kvlab.core:durable_file;
import :errors;

export namespace kvlab {

// The reason for a failed file operation, for people: a full disk or quota says so in plain
// words (the system's "Disk quota exceeded" does not tell a user that space ran out).
inline std::string io_error_text(int code) {
  if (code == ENOSPC || code == EDQUOT) return "no space left on device";
  return std::generic_category().message(code);
}

// A name part no other writer picks, in this process or another: the process id (so a
// folder's owner can be found), a random number and a counter.
inline std::string unique_name_part() {
  static std::atomic<std::uint64_t> counter{0};
  static const std::uint64_t random = (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(random));
  return std::to_string(::getpid()) + "-" + hex + "-" + std::to_string(counter++);
}

// A file being written with write(2). It remembers the first failure, so a writer can stream
// many pieces and check once; later writes after a failure do nothing.
class file_output {
public:
  enum class mode {
    create_new,      // fail if the file exists: never share a file another writer created
    replace_contents // create the file or truncate it
  };

  file_output(const std::filesystem::path& file, mode how) {
    const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (how == mode::create_new ? O_EXCL : O_TRUNC);
    descriptor_ = ::open(file.c_str(), flags, 0666);
    if (descriptor_ < 0) failure_ = errno;
  }
  ~file_output() {
    if (descriptor_ >= 0) ::close(descriptor_);
  }
  file_output(const file_output&) = delete;
  file_output& operator=(const file_output&) = delete;

  bool opened() const { return descriptor_ >= 0; }
  bool ok() const { return failure_ == 0; }
  int failure() const { return failure_; }

  bool write(std::span<const std::byte> bytes) {
    const auto* next = bytes.data();
    for (std::size_t left = bytes.size(); left > 0 && ok();) {
      const ssize_t written = ::write(descriptor_, next, left);
      if (written < 0) {
        if (errno != EINTR) failure_ = errno;
        continue;
      }
      next += written;
      left -= static_cast<std::size_t>(written);
    }
    return ok();
  }
  bool write(std::string_view text) { return write(std::as_bytes(std::span(text.data(), text.size()))); }

  // Flushes the contents to the disk and closes the file; returns 0 or the first failure's errno.
  int sync_and_close() {
    if (descriptor_ >= 0) {
      if (ok() && ::fsync(descriptor_) != 0) failure_ = errno;
      if (::close(descriptor_) != 0 && ok()) failure_ = errno;
      descriptor_ = -1;
    }
    return failure_;
  }

private:
  int descriptor_ = -1;
  int failure_ = 0;
};

// Makes `path` (a file, or a folder after a rename into it) survive a power loss. Folders
// on file systems that cannot sync them (EINVAL) are accepted: there is nothing more to do.
inline void sync_to_disk(const std::filesystem::path& path) {
  const int descriptor = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  int failure = descriptor < 0 ? errno : 0;
  if (descriptor >= 0) {
    if (::fsync(descriptor) != 0 && errno != EINVAL) failure = errno;
    ::close(descriptor);
  }
  if (failure != 0) throw error("'" + path.string() + "': cannot sync to disk: " + io_error_text(failure));
}

// Writes `text` to `file` (creating or truncating it) and syncs it to the disk. Not atomic:
// for files inside a folder that is itself renamed into place when complete.
inline void write_file_durably(const std::filesystem::path& file, std::string_view text) {
  file_output out(file, file_output::mode::replace_contents);
  out.write(text);
  if (const int failure = out.sync_and_close(); failure != 0)
    throw error("'" + file.string() + "': cannot write: " + io_error_text(failure));
}

// Replaces `file` whole or not at all: `fill` writes the contents into a file_output on a
// temporary sibling, which is synced, renamed over `file`, and the folder synced. On any
// failure (or an exception from `fill`) the temporary is removed and `file` is as it was.
// Errors start with `subject` (say, "npy file 'x.npy'"), then say what failed and why.
template <class Fill>
void write_file_atomically(const std::filesystem::path& file, const std::string& subject, Fill&& fill) {
  const auto temporary = file.parent_path() / ("." + file.filename().string() + ".tmp-" + unique_name_part());
  struct remove_unless_kept {
    const std::filesystem::path& path;
    bool keep = false;
    ~remove_unless_kept() {
      std::error_code ignored;
      if (!keep) std::filesystem::remove(path, ignored);
    }
  } cleanup{temporary};
  file_output out(temporary, file_output::mode::create_new);
  if (!out.opened()) {
    cleanup.keep = true; // nothing was created, and the name may be someone else's
    throw error(subject + ": cannot create the temporary file '" + temporary.string() +
                "' next to it: " + io_error_text(out.failure()));
  }
  std::forward<Fill>(fill)(out);
  if (const int failure = out.sync_and_close(); failure != 0)
    throw error(subject + ": cannot write the temporary file '" + temporary.string() + "': " + io_error_text(failure));
  std::error_code rename_error;
  std::filesystem::rename(temporary, file, rename_error);
  if (rename_error)
    throw error(subject + ": cannot replace it with the temporary file '" + temporary.string() +
                "': " + io_error_text(rename_error.value()));
  cleanup.keep = true;
  sync_to_disk(file.parent_path().empty() ? std::filesystem::path(".") : file.parent_path());
}

inline void write_text_atomically(const std::filesystem::path& file, std::string_view text) {
  write_file_atomically(file, "'" + file.string() + "'", [&](file_output& out) { out.write(text); });
}

} // namespace kvlab
