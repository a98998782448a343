#include "core/text_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace attnkit {
namespace {

// open(2) without blocking: a FIFO without a writer must not hang the open.
int open_readable(const std::string& path, std::string& problem) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    problem = std::strerror(errno);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    problem = "it is a directory, not a file";
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // ordinary reads from here on
  return fd;
}

}  // namespace

TextFile read_text_file(const std::string& path, std::size_t max_bytes) {
  TextFile out;
  const int fd = open_readable(path, out.problem);
  if (fd < 0) return out;
  std::string text;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      out.problem = std::strerror(errno);
      ::close(fd);
      return out;
    }
    if (n == 0) break;
    if (text.size() + static_cast<std::size_t>(n) > max_bytes) {
      out.problem = "it is larger than " + std::to_string(max_bytes >> 10) + " KiB, the limit for a text file";
      ::close(fd);
      return out;
    }
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  out.text = std::move(text);
  return out;
}

bool readable_file(const std::string& path) {
  std::string problem;
  const int fd = open_readable(path, problem);
  if (fd >= 0) ::close(fd);
  return fd >= 0;
}

}  // namespace attnkit
