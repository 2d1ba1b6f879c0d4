package dsync

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestHoldSizeClass: a fresh owner's Mutex hold and the owner's bytes are
// one allocation (freshMutexOwner) of 416 bytes, a size class of Go's
// allocator, so that a held Mutex costs its Client at most 1 KB of heap
// (make scale's "100k held: client heap per held lock", issue 18: 1040 B
// when it was 448 bytes, 2026-12-05, 13:20 UTC). The hold's fields leave
// no padding between them, and a hold never re-entered keeps one cancel
// func, not a slice.
func TestHoldSizeClass(t *testing.T) {
	require.LessOrEqual(t, unsafe.Sizeof(hold{}), uintptr(280), "hold")
	require.LessOrEqual(t, unsafe.Sizeof(freshMutexOwner{}), uintptr(416), "freshMutexOwner (hold and the owner's room)")
}
