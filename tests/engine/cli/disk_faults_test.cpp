// Every writer under a full disk and a read-only folder: the write fails with an octodiff::Error
// that names the file and the reason, and nothing is left behind — no partial file, no half
// folder. A full disk is a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored: writes past it fail
// with EFBIG as they would with ENOSPC); a read-only folder is a read-only bind mount of the
// folder in a private mount namespace (EROFS; works as root, where permissions do not stop
// writes). Each write runs in a forked child, so the limit and the mount vanish with it.
// png_test.cpp covers write_png on a real full tmpfs (ENOSPC) and as an unprivileged user (EACCES).
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <set>
#include <string>

#include "cli_runner.h"
#include "core/error.h"
#include "io/files.h"
#include "io/flax_msgpack.h"
#include "io/npy.h"
#include "io/png.h"
#include "io/safetensors.h"
#include "io/single_file.h"
#include "pipeline/model_hash.h"

using namespace octodiff;
namespace fs = std::filesystem;

namespace {

enum class Fault { FileTooLarge, ReadOnly };

const char* fault_name(Fault f) { return f == Fault::FileTooLarge ? "file size limit" : "read-only folder"; }
const char* reason(Fault f) { return f == Fault::FileTooLarge ? "File too large" : "Read-only file system"; }

// Puts this (child) process under the fault: every file over `limit` bytes, or `dir` read-only.
// Returns 77 with *why when this machine cannot do it.
int apply(Fault fault, const fs::path& dir, rlim_t limit, std::string* why) {
  if (fault == Fault::FileTooLarge) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit r{limit, limit};
    if (::setrlimit(RLIMIT_FSIZE, &r) != 0) return *why = "setrlimit failed", 77;
    return 0;
  }
  if (::unshare(CLONE_NEWNS) != 0 && ::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0)
    return *why = std::string("cannot create a private mount namespace: ") + std::strerror(errno), 77;
  if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      ::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) != 0 ||
      ::mount(nullptr, dir.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) != 0)
    return *why = std::string("cannot bind-mount the folder read-only: ") + std::strerror(errno), 77;
  return 0;
}

// Runs `body` in a child process under the fault; returns its exit status and message.
std::pair<int, std::string> under_fault(Fault fault, const fs::path& dir, rlim_t limit,
                                        const std::function<int(std::string*)>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return {1, "pipe failed"};
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string msg;
    int rc = apply(fault, dir, limit, &msg);
    try {
      if (rc == 0) rc = body(&msg);
    } catch (const std::exception& e) {
      msg = std::string("unexpected exception: ") + e.what(), rc = 1;
    }
    if (!msg.empty() && ::write(fds[1], msg.data(), msg.size()) < 0) rc = 1;
    ::_exit(rc);
  }
  ::close(fds[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status)) return {2, msg + " (child died with signal " + std::to_string(WTERMSIG(status)) + ")"};
  return {WEXITSTATUS(status), msg};
}

// The files (complete, partial or temporary) below `dir`; an empty folder a writer made before
// failing is not counted.
std::set<std::string> tree(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (!e.is_directory()) names.insert(fs::relative(e.path(), dir).string());
  return names;
}

// The message a failed write must give: the file's path and the reason.
int check_message(const std::string& what, const fs::path& file, Fault fault, std::string* m) {
  *m = what;
  if (what.find(file.string()) == std::string::npos) return *m = "does not name " + file.string() + ": " + what, 3;
  if (what.find(reason(fault)) == std::string::npos) return *m = cat("does not say '", reason(fault), "': ", what), 4;
  return 0;
}

// One writer under both faults: `write(path)` must throw an octodiff::Error naming `path` and
// the reason, and the folder must hold afterwards exactly what it held before (nothing).
void expect_clean_failures(const std::string& label, const std::string& file_name, rlim_t limit,
                           const std::function<void(const fs::path&)>& write) {
  for (Fault fault : {Fault::FileTooLarge, Fault::ReadOnly}) {
    const fs::path dir = test::temp_dir(cat("disk_faults_", label, fault == Fault::ReadOnly ? "_ro" : "_fsize"));
    const fs::path file = dir / file_name;
    auto [rc, msg] = under_fault(fault, dir, limit, [&](std::string* m) {
      try {
        write(file);
      } catch (const Error& e) {
        return check_message(e.what(), file, fault, m);
      }
      return *m = "the write succeeded", 1;
    });
    std::printf("  %-16s %-16s -> %s\n", label.c_str(), fault_name(fault), msg.c_str());
    if (rc == 77) {
      std::printf("  SKIPPED %s: %s\n", fault_name(fault), msg.c_str());
      continue;
    }
    EXPECT_EQ(rc, 0) << label << " under " << fault_name(fault) << ": " << msg;
    EXPECT_TRUE(tree(dir).empty()) << label << " under " << fault_name(fault) << " left "
                                   << (tree(dir).empty() ? "" : *tree(dir).begin());
  }
}

Tensor ramp(int64_t n) {
  Tensor t = Tensor::empty({n, n});
  for (int64_t i = 0; i < n * n; ++i) t[i] = static_cast<float>(i % 977) * 0.25f;
  return t;
}

TensorToWrite f32_tensor(const std::string& name, int64_t n) {
  return {name, DType::F32, {n, n}, [n](uint8_t* dst, size_t bytes) {
            const Tensor t = ramp(n);
            std::memcpy(dst, t.data(), bytes);
          }};
}

Image8 noise_image(int side) {
  Image8 img{side, side, std::vector<uint8_t>(static_cast<size_t>(side) * side * 3)};
  uint32_t x = 12345;
  for (auto& b : img.rgb) b = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  return img;
}

}  // namespace

TEST(DiskFaults, Npy) {
  expect_clean_failures("npy", "latents.npy", 16384, [](const fs::path& p) { write_npy(p, ramp(128)); });
}

TEST(DiskFaults, Safetensors) {
  expect_clean_failures("safetensors", "w.safetensors", 16384,
                        [](const fs::path& p) { write_safetensors(p, {f32_tensor("a.weight", 128)}); });
}

TEST(DiskFaults, FlaxMsgpack) {
  expect_clean_failures("flax_msgpack", "flax_model.msgpack", 16384,
                        [](const fs::path& p) { write_flax_msgpack(p, {f32_tensor("a/kernel", 128)}); });
}

TEST(DiskFaults, SingleFileCheckpoint) {
  expect_clean_failures("single_file", "model.safetensors", 16384, [](const fs::path& p) {
    SingleFileContents contents;
    contents.extra = {f32_tensor("alphas_cumprod", 128)};
    write_single_file(p, contents, DType::F32);
  });
}

TEST(DiskFaults, Png) {
  expect_clean_failures("png", "image.png", 16384,
                        [](const fs::path& p) { write_png(p, noise_image(128), {{"parameters", "text"}}); });
}

TEST(DiskFaults, TextFile) {
  const std::string text(20000, 'x');
  expect_clean_failures("text", "README.md", 4096,
                        [&](const fs::path& p) { write_file_atomic(p, text.data(), text.size()); });
}

TEST(DiskFaults, FileCopy) {
  const fs::path from = test::tiny_sd_dir() / "goldens" / "unet.safetensors";
  expect_clean_failures("copy", "unet.safetensors", 65536, [&](const fs::path& p) { copy_file_atomic(from, p); });
}

TEST(DiskFaults, ModelHashCacheIsOnlyACache) {
  // The hash cache cannot be written: the hash is still computed, nothing is left in the cache folder.
  const fs::path weights = test::tiny_sd_dir() / "text_encoder" / "model.safetensors";
  for (Fault fault : {Fault::FileTooLarge, Fault::ReadOnly}) {
    const fs::path dir = test::temp_dir(cat("disk_faults_hash", fault == Fault::ReadOnly ? "_ro" : "_fsize"));
    auto [rc, msg] = under_fault(fault, dir, 0, [&](std::string* m) {
      ::setenv("OCTODIFF_CACHE_DIR", dir.c_str(), 1);
      *m = cached_file_sha256(weights);
      return m->size() == 64 ? 0 : 1;
    });
    std::printf("  model hash under %s: %s\n", fault_name(fault), msg.c_str());
    if (rc == 77) continue;
    EXPECT_EQ(rc, 0) << msg;
    EXPECT_TRUE(tree(dir).empty());
  }
}

namespace {

// A CLI command under both faults: it must exit with an error naming `file` (below the faulted
// folder) and the reason, and leave the faulted folder as empty as it found it. `args` may use
// "{dir}" for the faulted folder.
void expect_cli_fails_cleanly(const std::string& label, std::vector<std::string> args, const std::string& file,
                              rlim_t limit, std::vector<Fault> faults = {Fault::FileTooLarge, Fault::ReadOnly}) {
  for (Fault fault : faults) {
    const fs::path work = test::temp_dir(cat("disk_faults_cli_", label, fault == Fault::ReadOnly ? "_ro" : "_fsize"));
    const fs::path dir = work / "out";
    fs::create_directories(dir);
    std::vector<std::string> expanded = args;
    for (auto& a : expanded)
      for (size_t at; (at = a.find("{dir}")) != std::string::npos;) a.replace(at, 5, dir.string());
    auto [rc, msg] = under_fault(fault, dir, limit, [&](std::string* m) {
      ::setenv("OCTODIFF_CACHE_DIR", (work / "cache").c_str(), 1);
      ::setenv("OCTODIFF_WEIGHT_CACHE", "off", 1);  // its notes would crowd the error in stderr
      const test::CliRun r = test::run_cli(expanded, work);
      if (r.code == 0) return *m = "the command succeeded: " + r.out, 1;
      if (r.code != 1) return *m = cat("exit status ", r.code, ": ", r.err), 5;
      return check_message(r.err, dir / file, fault, m);
    });
    std::printf("  %-22s %-16s -> %s", label.c_str(), fault_name(fault), msg.c_str());
    if (rc == 77) continue;
    EXPECT_EQ(rc, 0) << label << " under " << fault_name(fault) << ": " << msg;
    EXPECT_TRUE(tree(dir).empty()) << label << " under " << fault_name(fault) << " left "
                                   << (tree(dir).empty() ? "" : *tree(dir).begin());
  }
}

}  // namespace

TEST(DiskFaults, CliGenerateGrid) {
  expect_cli_fails_cleanly("generate --out", test::tiny_generate({"--prompt", "a", "--steps", "2", "--out", "{dir}/grid.png"}),
                           "grid.png", 2048);
}

TEST(DiskFaults, CliGenerateImagesAndLatents) {
  // The grid goes to the writable work folder; the per-image PNGs / the latents to the read-only one.
  expect_cli_fails_cleanly("generate --out-dir",
                           test::tiny_generate({"--prompt", "a", "--steps", "2", "--out", "grid.png", "--out-dir", "{dir}/images"}),
                           "images", 0, {Fault::ReadOnly});
  expect_cli_fails_cleanly("generate --save-latents",
                           test::tiny_generate({"--prompt", "a", "--steps", "2", "--out", "grid.png", "--save-latents",
                                                "{dir}/latents.npy"}),
                           "latents.npy", 0, {Fault::ReadOnly});
}

TEST(DiskFaults, CliComparisonSheet) {
  // The sheet command writes the cells (into sheet-cells/ beside the sheet) first.
  expect_cli_fails_cleanly("sheet",
                           test::tiny_generate({"--prompt", "a", "--steps", "2", "--x", "guidance=3,7.5", "--out",
                                                "{dir}/sheet.png"}),
                           "sheet-cells", 2048);
}

TEST(DiskFaults, CliConvert) {
  expect_cli_fails_cleanly("convert", {"convert", "--to", "flax", test::tiny_sd_dir().string(), "{dir}/flax"}, "flax",
                           65536);
}

TEST(DiskFaults, CliMakeRandomModel) {
  expect_cli_fails_cleanly("make-random-model",
                           {"make-random-model", "--arch", "taesd", "--layout", "diffusers", "--out", "{dir}/taesd"},
                           "taesd", 65536);
}
