// A read-only memory mapping of a whole file: model weights and vocabularies are read in
// place, so loading a model costs page faults on what is touched, not a copy of the file.
module;
#include <cerrno>
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
export module kvlab.core:mapped_file;
import :errors;

export namespace kvlab {

class mapped_file {
public:
  // Maps `file` read-only; throws kvlab::error naming the file and the reason.
  explicit mapped_file(const std::filesystem::path& file) : path_(file) {
    const auto fail = [&](const std::string& problem) {
      return error("'" + file.string() + "': cannot open: " + problem);
    };
    std::error_code status_error;
    const auto status = std::filesystem::status(file, status_error);
    if (status.type() == std::filesystem::file_type::not_found) throw fail("no such file");
    if (status_error) throw fail(status_error.message());
    if (std::filesystem::is_directory(status)) throw fail("it is a directory, not a file");
    const int descriptor = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    if (descriptor < 0) throw fail(std::generic_category().message(errno));
    struct stat info{};
    if (::fstat(descriptor, &info) != 0) {
      const int saved = errno;
      ::close(descriptor);
      throw fail(std::generic_category().message(saved));
    }
    size_ = static_cast<std::size_t>(info.st_size);
    if (size_ > 0) {
      void* address = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, descriptor, 0);
      const int saved = errno;
      ::close(descriptor);
      if (address == MAP_FAILED) throw fail("mmap failed: " + std::generic_category().message(saved));
      data_ = static_cast<const std::byte*>(address);
    } else {
      ::close(descriptor);
    }
  }
  mapped_file(mapped_file&& other) noexcept
      : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)) {}
  mapped_file& operator=(mapped_file&& other) noexcept {
    if (this != &other) {
      unmap();
      path_ = std::move(other.path_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  ~mapped_file() { unmap(); }

  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  std::size_t size() const noexcept { return size_; }
  const std::filesystem::path& path() const noexcept { return path_; }

private:
  void unmap() noexcept {
    if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = nullptr;
  }

  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

// The whole file as text, read through a mapping; kvlab::error naming the file when it
// cannot be opened.
inline std::string read_whole_file(const std::filesystem::path& file) {
  const mapped_file mapped(file);
  return {reinterpret_cast<const char*>(mapped.bytes().data()), mapped.size()};
}

} // namespace kvlab
