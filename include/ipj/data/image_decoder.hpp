// Decoding of one PNG (libpng's simplified API) or JPEG (libjpeg-turbo) file into planar uint8 pixels
// [C, H, W], with PIL's conversions so that results match torchvision's ImageFolder loader (docs/DATA.md).
// Limits: 8- and 16-bit PNG (16-bit is rounded to 8 bits; PIL clips it), no gamma handling beyond libpng's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ipj::data {

// What a file holds before any conversion.
struct ImageHeader {
  int height = 0;
  int width = 0;
  int channels = 0;  // 1: grayscale (PNG gray/gray+alpha, 1-component JPEG); 3: colour (RGB, palette, CMYK)
};

struct DecodedImage {
  int channels = 0;
  int height = 0;
  int width = 0;
  std::vector<std::uint8_t> pixels;  // [channels, height, width], planar
};

// True for the extensions ipj decodes: .png, .jpg, .jpeg (any case).
bool has_image_extension(const std::string& path);

// Reads the header of a PNG or JPEG held in `bytes` (the file's content; the type comes from the content,
// not the name). Throws ipj::Error(invalid_input) naming `path` for anything else or a damaged header.
ImageHeader read_image_header(const std::string& path, const std::string& bytes);

// Decodes `bytes` (the content of `path`) to `channels` (1 or 3) 8-bit planes. Alpha is dropped (as PIL's
// convert does), palettes expanded, 16-bit rounded to 8-bit, CMYK converted with PIL's formula, colour to
// grey with ITU-R 601-2 luma (L = (19595 R + 38470 G + 7471 B + 2^15) >> 16), grey to colour by copying.
// Throws ipj::Error(invalid_input) naming `path` for a corrupt, truncated or unsupported file.
DecodedImage decode_image(const std::string& path, const std::string& bytes, int channels);

// Reads and decodes a file (ipj::Error(io) when it cannot be read).
DecodedImage decode_image_file(const std::string& path, int channels);

// Converts planar pixels [from, plane] to [to, plane] (1 <-> 3) with the rules above; to == from copies.
void convert_channels(const std::uint8_t* source, int from, int to, std::int64_t plane, std::uint8_t* target);

}  // namespace ipj::data
