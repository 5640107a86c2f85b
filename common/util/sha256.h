// SHA-256 of bytes and files (content addressing of data sets and checkpoints, token hashing).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ablate {

// Lower-case hex digest of `data`.
std::string Sha256Hex(std::string_view data);

// Lower-case hex digest of the file at `path`, streamed.
absl::StatusOr<std::string> Sha256File(const std::string& path);

// `bytes` bytes from OpenSSL's CSPRNG, lower-case hex (secrets: bearer tokens, lease tokens).
absl::StatusOr<std::string> RandomHex(size_t bytes);

// What the server keeps of a secret it hands out (bearer tokens, lease tokens, data-prep claim
// tokens): its SHA-256, hex. The secret itself travels once, in the answer that grants it; every
// later call is matched on this digest. One function, so every secret is kept the same way.
inline std::string SecretDigest(std::string_view secret) { return Sha256Hex(secret); }

// Incremental hashing for streams (chunked uploads).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(std::string_view data);
  std::string HexDigest();  // finalises; call once

 private:
  void* ctx_;
};

}  // namespace ablate
