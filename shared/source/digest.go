package source

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
)

// PartSum is one manifest part's SHA-256 (hex) and length.
type PartSum struct {
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// PartsDigest is the digest of a manifest read in parts: the hex SHA-256
// of "bulkrun-parts-v1\n" followed by one line "{part's SHA-256 hex}
// {part's bytes}\n" per part, in order. SHA-256 cannot be computed from
// parts hashed at once, so a source read in parts has this digest instead
// of its manifest's SHA-256; any read of the same object by the same part
// size gives it.
func PartsDigest(parts []PartSum) string {
	h := sha256.New()
	io.WriteString(h, "bulkrun-parts-v1\n")
	for _, p := range parts {
		fmt.Fprintf(h, "%s %d\n", p.SHA256, p.Bytes)
	}
	return hex.EncodeToString(h.Sum(nil))
}
