package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCLIUnlockForceLockerHolder (issue 38, item 10): when the holder took
// the lock with Lock (no lock context), unlock --force does not claim that
// its lock context was cancelled: it says the holder's Client saw the
// release but nothing stops the holder's work.
func TestCLIUnlockForceLockerHolder(t *testing.T) {
	e := newEnv(t)
	c := e.client()
	ctx := context.Background()
	m := c.NewMutex("stuck-locker")
	m.Lock()
	rc := srv.Client(t)
	forceCh := e.prefix + ":force"
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := rc.Do(ctx, rc.B().PubsubNumsub().Channel(forceCh).Build()).AsIntMap()
		require.NoError(t, err)
		if n[forceCh] >= 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the Client did not subscribe to %s within 10 s", forceCh)
		time.Sleep(time.Millisecond)
	}
	code, out, errs := e.run(ctx, "unlock", "--force", "--yes", "stuck-locker")
	require.Equal(t, 0, code, "unlock: exit %d, out %q, err %q", code, out, errs)
	assert.Contains(t, out, "released mutex stuck-locker held by ")
	assert.NotContains(t, out, "cancelled its lock context", "the holder has no lock context")
	assert.Contains(t, out, "took the lock with Lock, which has no lock context to cancel")
}

// TestCLIAddrCheckedWithoutSecrets (issue 38, sweep: the CLI): --addr (or
// REDIS_ADDR) holding a URL with a password is refused with exit status 2
// and without showing the password; a port outside 1..65535 is refused
// before connecting.
func TestCLIAddrCheckedWithoutSecrets(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, addr := range []string{"redis://:S3CR3T@127.0.0.1:1", "app:S3CR3T@127.0.0.1:1", "127.0.0.1:99999", "127.0.0.1"} {
		e.vars["REDIS_ADDR"] = addr
		code, out, errs := e.run(ctx, "list")
		assert.Equal(t, 2, code, "%s: exit status; out %q, err %q", addr, out, errs)
		assert.NotContains(t, out+errs, "S3CR3T", addr)
		assert.Contains(t, errs, "--addr", addr)
	}
}
