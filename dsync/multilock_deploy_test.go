package dsync_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/dsync/dsync/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMultiLockMembersByDeployment (issue 38, item 2): a MultiLock tells
// members apart by deployment and name. Mutexes of one name behind Clients
// of two servers are two members, both taken (another Client cannot take
// the name on either server meanwhile); behind two Clients of one server
// they are one member, taken once. RedLocks of one name over different
// servers are two members too, and a RedLock over two Clients of one
// server is refused.
func TestMultiLockMembersByDeployment(t *testing.T) {
	servers := redlockServers(t)
	prefix := testPrefix(t)
	on := func(i int) *dsync.Client {
		return newClientOn(t, servers[i].Client(t), dsync.WithKeyPrefix(prefix))
	}
	c1, c2, c1b, c2b := on(0), on(1), on(0), on(1)
	ctx := ctxT(t)

	// Two servers: two members.
	ml := dsync.NewMultiLock(c1.NewMutex("inv"), c2.NewMutex("inv"))
	lctx, err := ml.LockContext(ctx)
	require.NoError(t, err)
	assert.True(t, heldIn(t, servers[0], prefix, "inv"), "held on the first server")
	assert.True(t, heldIn(t, servers[1], prefix, "inv"), "held on the second server")
	assert.False(t, c2b.NewMutex("inv").TryLock(), "another Client cannot take it on the second server")
	assert.False(t, c1b.NewMutex("inv").TryLock(), "nor on the first")
	require.NoError(t, ml.UnlockContext(lctx))
	assert.False(t, heldIn(t, servers[1], prefix, "inv"))

	// One server behind two Clients: one member, taken once (no wait on
	// itself, one release frees it).
	same := dsync.NewMultiLock(c1.NewMutex("inv-same"), c1b.NewMutex("inv-same"))
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lctx, err = same.LockContext(sctx)
	require.NoError(t, err)
	require.NoError(t, same.UnlockContext(lctx))
	assert.False(t, heldIn(t, servers[0], prefix, "inv-same"), "released")

	// RedLocks of one name over different servers: two members.
	rls := dsync.NewMultiLock(dsync.NewRedLock("rinv", []*dsync.Client{c1}), dsync.NewRedLock("rinv", []*dsync.Client{c2}))
	lctx, err = rls.LockContext(ctx)
	require.NoError(t, err)
	assert.True(t, heldIn(t, servers[0], prefix, "rinv"))
	assert.True(t, heldIn(t, servers[1], prefix, "rinv"))
	require.NoError(t, rls.UnlockContext(lctx))

	// A RedLock's nodes must be independent.
	_, err = dsync.NewRedLock("rsame", []*dsync.Client{c1, c2, c1b}).LockContext(ctx)
	require.ErrorIs(t, err, dsync.ErrInvalidArgument)
	assert.Contains(t, err.Error(), `"rsame"`)
	assert.Contains(t, err.Error(), servers[0].Addr)
}

// heldIn reports whether the Mutex name is held on s (its key holds an
// owner, not the "- <token>" marker a release leaves).
func heldIn(t *testing.T, s *redistest.Server, prefix, name string) bool {
	v := lockValue(t, s, prefix, name)
	return v != "" && !strings.HasPrefix(v, "-")
}
