package scripts

import (
	"crypto/sha1"
	"encoding/hex"
)

// MutexAcquireSource and MutexAcquireSHA let a caller send the acquire script
// itself, as EVALSHA (or EVAL) followed by WAIT on one dedicated connection:
// WAIT counts only the writes of its own connection, so it cannot follow a
// script run through the shared pipeline. The SHA-1 is computed, never
// copied by hand.
var (
	MutexAcquireSource = mutexAcquireSrc
	MutexAcquireSHA    = sha1Hex(mutexAcquireSrc)
)

func sha1Hex(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}
