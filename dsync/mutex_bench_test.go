package dsync_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Quick in-package figures; the side-by-side comparison with the peers is
// in bench/.

func BenchmarkMutexSerial(b *testing.B) {
	c := newClient(b)
	m := c.NewMutex("serial")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		lctx, err := m.LockContext(ctx)
		require.NoError(b, err)
		require.NoError(b, m.UnlockContext(lctx))
	}
}

func BenchmarkMutexContended16(b *testing.B) {
	c := newClient(b)
	m := c.NewMutex("contended")
	b.SetParallelism(8) // 8 x GOMAXPROCS(2) = 16 goroutines
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			lctx, err := m.LockContext(ctx)
			if !assert.NoError(b, err) {
				return
			}
			if !assert.NoError(b, m.UnlockContext(lctx)) {
				return
			}
		}
	})
}
