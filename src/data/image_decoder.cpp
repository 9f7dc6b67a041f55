// PNG through libpng's simplified API, JPEG through libjpeg-turbo's libjpeg API (setjmp error handling in
// plain C-style functions without C++ objects, so that longjmp skips no destructor), then PIL's conversions.
#include "ipj/data/image_decoder.hpp"

#include <cstdio>  // before jpeglib.h, which uses FILE

#include <jerror.h>  // message codes (JWRN_JPEG_EOF)
#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <cctype>
#include <csetjmp>
#include <cstring>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"

namespace ipj::data {
namespace {

enum class FileType { png, jpeg, other };

FileType detect_type(const std::string& bytes) {
  static const unsigned char png_signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), png_signature, 8) == 0) return FileType::png;
  if (bytes.size() >= 3 && static_cast<unsigned char>(bytes[0]) == 0xFF &&
      static_cast<unsigned char>(bytes[1]) == 0xD8 && static_cast<unsigned char>(bytes[2]) == 0xFF)
    return FileType::jpeg;
  return FileType::other;
}

[[noreturn]] void fail_file(const std::string& path, const std::string& what) {
  fail(ErrorCategory::invalid_input, "image '" + path + "': " + what);
}

void require_known_type(const std::string& path, const std::string& bytes, FileType type) {
  if (type != FileType::other) return;
  if (bytes.empty()) fail_file(path, "the file is empty (0 bytes); delete it or pass --skip-bad-images");
  fail_file(path,
            "not a PNG or JPEG file (its first bytes are neither signature); convert it or pass "
            "--skip-bad-images");
}

// ---- PNG ----

// Opens `bytes` as a PNG; on failure throws with libpng's message.
void begin_png(const std::string& path, const std::string& bytes, png_image& image) {
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) {
    const std::string message = image.message;
    png_image_free(&image);
    fail_file(path, "damaged PNG header (" + message + ")");
  }
  // A PNG row holds at least one bit a pixel and deflate inflates at most 1032:1: a header declaring more
  // pixels than the file can hold is refused before any pixel buffer is allocated for them.
  const std::uint64_t pixels = std::uint64_t{image.height} * image.width;
  const std::uint64_t most = static_cast<std::uint64_t>(bytes.size()) * 8 * 1032;
  if (pixels > most) {
    png_image_free(&image);
    fail_file(path, "its header declares " + std::to_string(image.height) + "x" +
                        std::to_string(image.width) + " pixels, more than its " +
                        std::to_string(bytes.size()) + " bytes can hold (damaged or truncated)");
  }
}

DecodedImage decode_png(const std::string& path, const std::string& bytes, int channels) {
  png_image image;
  begin_png(path, bytes, image);
  image.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;  // 16-bit samples are scaled, not treated as linear light
  const bool color = (image.format & PNG_FORMAT_FLAG_COLOR) != 0;
  const bool alpha = (image.format & PNG_FORMAT_FLAG_ALPHA) != 0;
  // Keep the alpha channel in the output so that libpng composes nothing; it is dropped below (PIL's way).
  image.format = (color ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY) | (alpha ? PNG_FORMAT_FLAG_ALPHA : 0u);
  const int stored_channels = (color ? 3 : 1) + (alpha ? 1 : 0);
  const int height = static_cast<int>(image.height), width = static_cast<int>(image.width);
  std::vector<std::uint8_t> interleaved(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, interleaved.data(), 0, nullptr)) {
    const std::string message = image.message;
    png_image_free(&image);
    fail_file(path, "corrupt or truncated PNG data (" + message + ")");
  }
  const int native = color ? 3 : 1;
  const std::int64_t plane = static_cast<std::int64_t>(height) * width;
  std::vector<std::uint8_t> planar(static_cast<size_t>(native * plane));
  for (std::int64_t pixel = 0; pixel < plane; ++pixel)
    for (int channel = 0; channel < native; ++channel)
      planar[static_cast<size_t>(channel * plane + pixel)] =
          interleaved[static_cast<size_t>(pixel * stored_channels + channel)];
  DecodedImage result{channels, height, width, {}};
  result.pixels.resize(static_cast<size_t>(channels * plane));
  convert_channels(planar.data(), native, channels, plane, result.pixels.data());
  return result;
}

// ---- JPEG ----

struct JpegErrorManager {
  jpeg_error_mgr base;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr info) {
  auto* manager = reinterpret_cast<JpegErrorManager*>(info->err);
  (*info->err->format_message)(info, manager->message);
  std::longjmp(manager->jump, 1);
}

// Warnings are ignored (PIL loads such files) except premature end of data: a truncated file is an error.
void jpeg_emit_message(j_common_ptr info, int level) {
  if (level == -1 && info->err->msg_code == JWRN_JPEG_EOF) jpeg_error_exit(info);
}

struct JpegResult {
  int height = 0, width = 0, components = 0;  // components: 1 grey, 3 RGB, 4 CMYK
  bool inverted_cmyk = false;                 // Adobe CMYK is stored inverted (PIL reads it as "CMYK;I")
};

// Decodes into `output` (resized through `allocate`); returns false with `message` set on error. No C++
// objects live in this frame: longjmp may leave it.
using JpegAllocate = std::uint8_t* (*)(void* context, std::size_t bytes);
bool run_jpeg(const std::string* bytes, bool header_only, JpegResult* result, JpegAllocate allocate,
              void* context, char* message) {
  jpeg_decompress_struct info;
  JpegErrorManager manager;
  info.err = jpeg_std_error(&manager.base);
  manager.base.error_exit = jpeg_error_exit;
  manager.base.emit_message = jpeg_emit_message;
  if (setjmp(manager.jump)) {
    std::memcpy(message, manager.message, JMSG_LENGTH_MAX);
    jpeg_destroy_decompress(&info);
    return false;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, reinterpret_cast<const unsigned char*>(bytes->data()),
               static_cast<unsigned long>(bytes->size()));
  jpeg_read_header(&info, TRUE);
  const bool cmyk = info.jpeg_color_space == JCS_CMYK || info.jpeg_color_space == JCS_YCCK;
  const bool grey = info.jpeg_color_space == JCS_GRAYSCALE;
  info.out_color_space = cmyk ? JCS_CMYK : grey ? JCS_GRAYSCALE : JCS_RGB;
  result->height = static_cast<int>(info.image_height);
  result->width = static_cast<int>(info.image_width);
  result->components = cmyk ? 4 : grey ? 1 : 3;
  result->inverted_cmyk = cmyk && info.saw_Adobe_marker;
  if (header_only) {
    jpeg_destroy_decompress(&info);
    return true;
  }
  jpeg_start_decompress(&info);
  const std::size_t row_bytes = static_cast<std::size_t>(info.output_width) * info.output_components;
  std::uint8_t* output = allocate(context, row_bytes * info.output_height);
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = output + static_cast<std::size_t>(info.output_scanline) * row_bytes;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return true;
}

std::uint8_t* allocate_vector(void* context, std::size_t bytes) {
  auto* buffer = static_cast<std::vector<std::uint8_t>*>(context);
  buffer->assign(bytes, 0);
  return buffer->data();
}

// PIL's cmyk2rgb: nk = 255 - K; channel = nk - C * nk / 255 (rounded as PIL's MULDIV255).
std::uint8_t cmyk_channel(int ink, int not_black) {
  const int product = ink * not_black + 128;
  return static_cast<std::uint8_t>(std::clamp(not_black - (((product >> 8) + product) >> 8), 0, 255));
}

DecodedImage decode_jpeg(const std::string& path, const std::string& bytes, int channels) {
  JpegResult result;
  std::vector<std::uint8_t> interleaved;
  char message[JMSG_LENGTH_MAX] = {0};
  if (!run_jpeg(&bytes, false, &result, allocate_vector, &interleaved, message))
    fail_file(path, std::string("corrupt or truncated JPEG (") + message + ")");
  const std::int64_t plane = static_cast<std::int64_t>(result.height) * result.width;
  const int native = result.components == 1 ? 1 : 3;
  std::vector<std::uint8_t> planar(static_cast<size_t>(native * plane));
  for (std::int64_t pixel = 0; pixel < plane; ++pixel) {
    const std::uint8_t* source = interleaved.data() + pixel * result.components;
    if (result.components == 4) {
      auto ink = [&](int index) { return result.inverted_cmyk ? 255 - source[index] : source[index]; };
      const int not_black = 255 - ink(3);
      for (int channel = 0; channel < 3; ++channel)
        planar[static_cast<size_t>(channel * plane + pixel)] = cmyk_channel(ink(channel), not_black);
    } else {
      for (int channel = 0; channel < native; ++channel)
        planar[static_cast<size_t>(channel * plane + pixel)] = source[channel];
    }
  }
  DecodedImage decoded{channels, result.height, result.width, {}};
  decoded.pixels.resize(static_cast<size_t>(channels * plane));
  convert_channels(planar.data(), native, channels, plane, decoded.pixels.data());
  return decoded;
}

}  // namespace

bool has_image_extension(const std::string& path) {
  const auto dot = path.find_last_of('.');
  if (dot == std::string::npos || path.find('/', dot) != std::string::npos) return false;
  std::string extension = path.substr(dot + 1);
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extension == "png" || extension == "jpg" || extension == "jpeg";
}

ImageHeader read_image_header(const std::string& path, const std::string& bytes) {
  const FileType type = detect_type(bytes);
  require_known_type(path, bytes, type);
  if (type == FileType::png) {
    png_image image;
    begin_png(path, bytes, image);
    ImageHeader header{static_cast<int>(image.height), static_cast<int>(image.width),
                       (image.format & PNG_FORMAT_FLAG_COLOR) != 0 ? 3 : 1};
    png_image_free(&image);
    return header;
  }
  JpegResult result;
  char message[JMSG_LENGTH_MAX] = {0};
  if (!run_jpeg(&bytes, true, &result, nullptr, nullptr, message))
    fail_file(path, std::string("damaged JPEG header (") + message + ")");
  return {result.height, result.width, result.components == 1 ? 1 : 3};
}

DecodedImage decode_image(const std::string& path, const std::string& bytes, int channels) {
  if (channels != 1 && channels != 3)
    fail(ErrorCategory::internal, "decode_image: channels must be 1 or 3, got " + std::to_string(channels));
  const FileType type = detect_type(bytes);
  require_known_type(path, bytes, type);
  return type == FileType::png ? decode_png(path, bytes, channels) : decode_jpeg(path, bytes, channels);
}

DecodedImage decode_image_file(const std::string& path, int channels) {
  return decode_image(path, read_file(path), channels);
}

void convert_channels(const std::uint8_t* source, int from, int to, std::int64_t plane,
                      std::uint8_t* target) {
  if (from == to) {
    std::memcpy(target, source, static_cast<size_t>(from * plane));
  } else if (from == 1 && to == 3) {
    for (int channel = 0; channel < 3; ++channel)
      std::memcpy(target + channel * plane, source, static_cast<size_t>(plane));
  } else if (from == 3 && to == 1) {
    const std::uint8_t *red = source, *green = source + plane, *blue = source + 2 * plane;
    for (std::int64_t pixel = 0; pixel < plane; ++pixel)
      target[pixel] = static_cast<std::uint8_t>(
          (red[pixel] * 19595u + green[pixel] * 38470u + blue[pixel] * 7471u + 0x8000u) >> 16);
  } else {
    fail(ErrorCategory::internal,
         "convert_channels: " + std::to_string(from) + " -> " + std::to_string(to) + " channels");
  }
}

}  // namespace ipj::data
