#include "frontends/compression.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace inflight::frontends {
namespace {

std::string LowerTrim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// window_bits: 15 + 16 gzip, 15 zlib, -15 raw deflate.
StatusOr<std::string> Inflate(std::string_view data, int window_bits, size_t max_bytes) {
  z_stream z{};
  if (inflateInit2(&z, window_bits) != Z_OK) return InternalError("zlib: inflateInit failed");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buf[64 << 10];
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    const size_t n = sizeof buf - z.avail_out;
    if (rc != Z_OK && rc != Z_STREAM_END) break;
    if (out.size() + n > max_bytes) {
      inflateEnd(&z);
      return ResourceExhaustedError("request exceeds the maximum allowed input size");
    }
    out.append(buf, n);
    if (rc == Z_OK && n == 0 && z.avail_in == 0) break;  // truncated input
  }
  const bool trailing = rc == Z_STREAM_END && z.avail_in != 0;
  inflateEnd(&z);
  if (rc != Z_STREAM_END) return InvalidArgumentError("malformed compressed request body");
  // Another gzip member or garbage after the stream: refused rather than silently dropped.
  if (trailing) return InvalidArgumentError("data after the end of the compressed request body");
  return out;
}

}  // namespace

StatusOr<ContentCoding> ParseContentEncoding(std::string_view value) {
  const std::string v = LowerTrim(value);
  if (v.empty() || v == "identity") return ContentCoding::kIdentity;
  if (v == "gzip" || v == "x-gzip") return ContentCoding::kGzip;
  if (v == "deflate") return ContentCoding::kDeflate;
  return InvalidArgumentError("unsupported Content-Encoding '" + std::string(value) +
                              "' (identity, gzip, deflate)");
}

ContentCoding PreferredCoding(std::string_view accept_encoding) {
  ContentCoding best = ContentCoding::kIdentity;
  double best_q = 0;
  size_t start = 0;
  while (start <= accept_encoding.size()) {
    size_t end = accept_encoding.find(',', start);
    if (end == std::string_view::npos) end = accept_encoding.size();
    std::string_view item = accept_encoding.substr(start, end - start);
    start = end + 1;
    double q = 1;
    const size_t semi = item.find(';');
    if (semi != std::string_view::npos) {
      const std::string param = LowerTrim(item.substr(semi + 1));
      if (param.rfind("q=", 0) == 0) q = std::strtod(param.c_str() + 2, nullptr);
      item = item.substr(0, semi);
    }
    const std::string name = LowerTrim(item);
    ContentCoding c;
    if (name == "gzip" || name == "x-gzip") {
      c = ContentCoding::kGzip;
    } else if (name == "deflate") {
      c = ContentCoding::kDeflate;
    } else {
      continue;
    }
    if (q > best_q) best = c, best_q = q;
  }
  return best;
}

std::string_view CodingName(ContentCoding c) {
  switch (c) {
    case ContentCoding::kGzip:
      return "gzip";
    case ContentCoding::kDeflate:
      return "deflate";
    default:
      return "identity";
  }
}

StatusOr<std::string> Decompress(std::string_view data, ContentCoding coding, size_t max_bytes) {
  if (coding == ContentCoding::kIdentity) return std::string(data);
  if (coding == ContentCoding::kGzip) return Inflate(data, 15 + 16, max_bytes);
  // zlib-wrapped deflate: a header whose check bits hold (RFC 1950); otherwise raw deflate.
  const bool zlib_header =
      data.size() >= 2 && (static_cast<unsigned char>(data[0]) & 0x0f) == 8 &&
      ((static_cast<unsigned char>(data[0]) << 8) | static_cast<unsigned char>(data[1])) % 31 == 0;
  return Inflate(data, zlib_header ? 15 : -15, max_bytes);
}

std::string Compress(std::string_view data, ContentCoding coding) {
  if (coding == ContentCoding::kIdentity) return std::string(data);
  z_stream z{};
  deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, coding == ContentCoding::kGzip ? 15 + 16 : 15,
               8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, static_cast<uLong>(data.size())) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace inflight::frontends
