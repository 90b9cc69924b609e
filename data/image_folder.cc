#include "data/image_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"
#include "data/image_decode.h"
#include "data/text.h"

namespace traind::data {
namespace {

namespace fs = std::filesystem;

// A path for a message: as it is when it is UTF-8, else quoted.
std::string Named(const std::string& path) {
  return FirstInvalidUtf8(path) == std::string::npos ? path : QuoteForMessage(path);
}

bool IsImageName(const std::string& name) {
  return absl::EndsWithIgnoreCase(name, ".png") || absl::EndsWithIgnoreCase(name, ".jpg") ||
         absl::EndsWithIgnoreCase(name, ".jpeg");
}

// One folder of a class: its path relative to root and its image files.
struct Folder {
  std::string relative;
  std::vector<std::string> names;
};

// Lists `relative` (under `base`) and the folders below it into `out`,
// unsorted. `ancestors` (device, inode) stops a symlink cycle.
absl::Status Walk(const std::string& base, const std::string& relative,
                  std::vector<std::pair<dev_t, ino_t>>* ancestors, std::vector<Folder>* out) {
  const std::string path = base + "/" + relative;
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return DataError(absl::StrCat(Named(path), ": cannot list: ", std::strerror(errno)));
  }
  const std::pair<dev_t, ino_t> id(st.st_dev, st.st_ino);
  if (std::find(ancestors->begin(), ancestors->end(), id) != ancestors->end()) {
    return absl::OkStatus();
  }
  Folder folder{relative, {}};
  std::vector<std::string> subfolders;
  std::error_code ec;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    std::error_code status_ec;
    if (it->is_directory(status_ec)) {
      subfolders.push_back(name);
    } else if (IsImageName(name)) {
      folder.names.push_back(name);  // a broken link too: its decoding names it
    }
  }
  if (ec) return DataError(absl::StrCat(Named(path), ": cannot list: ", ec.message()));
  std::sort(folder.names.begin(), folder.names.end());
  out->push_back(std::move(folder));
  ancestors->push_back(id);
  for (const std::string& sub : subfolders) {
    TRAIND_RETURN_IF_ERROR(Walk(base, relative + "/" + sub, ancestors, out));
  }
  ancestors->pop_back();
  return absl::OkStatus();
}

// Writes `image` (HWC) planar at `out` (CHW).
void ToPlanar(const Image& image, uint8_t* out) {
  const size_t plane = static_cast<size_t>(image.height) * image.width;
  for (size_t p = 0; p < plane; ++p) {
    for (int c = 0; c < image.channels; ++c) {
      out[c * plane + p] = image.pixels[p * image.channels + c];
    }
  }
}

}  // namespace

absl::StatusOr<ImageFolder> ListImageFolder(const std::string& root, int64_t max_images) {
  std::string base = root;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  std::error_code ec;
  if (!fs::is_directory(base, ec)) {
    return InvalidSpecError(absl::StrCat(Named(root),
                                         ": not a directory (an image folder is a directory "
                                         "with one subfolder of images per class)"));
  }
  ImageFolder folder;
  for (fs::directory_iterator it(base, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code status_ec;
    if (!name.empty() && name[0] != '.' && it->is_directory(status_ec)) {
      folder.classes.push_back(name);
    }
  }
  if (ec) return DataError(absl::StrCat(Named(root), ": cannot list: ", ec.message()));
  if (folder.classes.empty()) {
    return InvalidSpecError(
        absl::StrCat(Named(root),
                     ": no class folders (an image folder holds one subfolder of "
                     "images per class: root/<class>/<image>)"));
  }
  std::sort(folder.classes.begin(), folder.classes.end());
  for (size_t label = 0; label < folder.classes.size(); ++label) {
    const std::string& name = folder.classes[label];
    if (FirstInvalidUtf8(name) != std::string::npos) {
      return DataError(absl::StrCat(Named(root), ": the class folder ", QuoteForMessage(name),
                                    " is not named in UTF-8 (class names are text)"));
    }
    std::vector<Folder> folders;
    std::vector<std::pair<dev_t, ino_t>> ancestors;
    TRAIND_RETURN_IF_ERROR(Walk(base, name, &ancestors, &folders));
    // torchvision's order: sorted(os.walk(class folder)), each folder's files sorted.
    std::sort(folders.begin(), folders.end(),
              [](const Folder& a, const Folder& b) { return a.relative < b.relative; });
    const size_t before = folder.files.size();
    for (const Folder& f : folders) {
      for (const std::string& file : f.names) {
        if (static_cast<int64_t>(folder.files.size()) >= max_images) {
          return DataError(absl::StrFormat("%s: more than %d image files, the most loaded",
                                           Named(root), max_images));
        }
        folder.files.push_back(f.relative + "/" + file);
        folder.labels.push_back(static_cast<int32_t>(label));
      }
    }
    if (folder.files.size() == before) {
      return DataError(absl::StrCat(
          Named(base + "/" + name),
          ": the class folder holds no image file (.png, .jpg or .jpeg; names starting with "
          "\".\" are ignored)"));
    }
  }
  return folder;
}

absl::StatusOr<ImageFolder> LoadImageFolder(const std::string& root, int channels, int height,
                                            int width, int threads, int64_t max_images) {
  if (channels != 1 && channels != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoadImageFolder: channels 1 (grayscale) or 3 (RGB), got ", channels));
  }
  const bool resize = height != 0 || width != 0;
  if (resize && (height < 1 || width < 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "LoadImageFolder: a size of %d×%d (height×width): both at least 1, or both 0 to keep",
        height, width));
  }
  TRAIND_ASSIGN_OR_RETURN(ImageFolder folder, ListImageFolder(root, max_images));
  std::string base = root;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  const size_t n = folder.files.size();

  // The first image sets the size when none is given.
  auto decode = [&](size_t i) -> absl::StatusOr<Image> {
    TRAIND_ASSIGN_OR_RETURN(Image image, DecodeImageFile(base + "/" + folder.files[i], channels));
    if (resize) image = ResizeBilinear(image, height, width);
    return image;
  };
  TRAIND_ASSIGN_OR_RETURN(Image first, decode(0));
  folder.channels = channels;
  folder.height = first.height;
  folder.width = first.width;
  const size_t image_bytes = static_cast<size_t>(channels) * first.height * first.width;
  try {
    folder.pixels.resize(n * image_bytes);
  } catch (const std::bad_alloc&) {
    return OutOfMemoryError(absl::StrFormat(
        "%s: %d images of %d×%d×%d bytes do not fit in memory (set data.image_size to make "
        "them smaller)",
        Named(root), n, channels, first.height, first.width));
  }
  ToPlanar(first, folder.pixels.data());

  auto load = [&](size_t i) -> absl::Status {
    TRAIND_ASSIGN_OR_RETURN(Image image, decode(i));
    if (image.height != folder.height || image.width != folder.width) {
      return DataError(absl::StrFormat(
          "%s: an image of %d×%d pixels (width×height), but the first image, %s, is %d×%d: the "
          "images of a folder must have one size (set data.image_size to resize them all)",
          Named(base + "/" + folder.files[i]), image.width, image.height,
          Named(base + "/" + folder.files[0]), folder.width, folder.height));
    }
    ToPlanar(image, folder.pixels.data() + i * image_bytes);
    return absl::OkStatus();
  };
  const size_t workers = std::min<size_t>(threads > 1 ? threads : 1, n - 1);
  if (workers <= 1) {
    for (size_t i = 1; i < n; ++i) TRAIND_RETURN_IF_ERROR(load(i));
    return folder;
  }
  // Each worker takes the next file; the error of the lowest index wins, so
  // the result does not depend on the threads. Files after a known error
  // are not decoded.
  std::atomic<size_t> next{1};
  std::atomic<size_t> first_error{n};
  std::mutex mu;
  absl::Status error;
  auto work = [&] {
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= n || i > first_error.load()) return;
      absl::Status status = load(i);
      if (!status.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (i < first_error.load()) {
          first_error.store(i);
          error = std::move(status);
        }
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(workers);
  for (size_t t = 0; t < workers; ++t) pool.emplace_back(work);
  for (std::thread& t : pool) t.join();
  if (!error.ok()) return error;
  return folder;
}

}  // namespace traind::data
