// Bilinear resizing of planar uint8 images, the same arithmetic as Pillow's Image.resize(..., BILINEAR)
// (what torchvision's Resize does to a PIL image): a triangle filter widened by the scale factor when
// shrinking (antialiasing), 22-bit fixed-point weights, horizontal pass then vertical pass, each rounded to
// uint8 (Pillow's libImaging/Resample.c). Documented and tested against Pillow in docs/DATA.md.
#pragma once

#include <cstdint>

namespace ipj::data {

// source: [channels, height, width] -> target: [channels, target_height, target_width]. Same size copies.
void resize_bilinear(const std::uint8_t* source, int channels, int height, int width, std::uint8_t* target,
                     int target_height, int target_width);

}  // namespace ipj::data
