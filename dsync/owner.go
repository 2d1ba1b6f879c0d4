package dsync

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

type ownerKey struct{}

// ownerVal is what a context carries: the owner, and for a lock context the
// fencing token of the acquisition that returned it.
type ownerVal struct {
	id    string
	token uint64
	// fresh marks an owner made by an acquire call for itself: nobody else
	// knows it until the call returns a lock context carrying it.
	fresh bool
}

// WithOwner returns a copy of ctx carrying a fresh owner: 128 random bits
// from crypto/rand, so no other client can guess it and release or renew a
// lock it does not hold. Acquisitions made with contexts carrying the same
// owner re-enter each other's locks.
func WithOwner(ctx context.Context) context.Context {
	return withOwnerVal(ctx, ownerVal{id: newOwnerID()})
}

// OwnerOf returns the owner ctx carries, if any.
func OwnerOf(ctx context.Context) (string, bool) {
	if ctx == nil {
		return "", false
	}
	v, ok := ctx.Value(ownerKey{}).(*ownerVal)
	if !ok {
		return "", false
	}
	return v.id, true
}

// FencingToken returns the fencing token of the acquisition that returned
// ctx (or the lock context ctx derives from). Tokens of one lock name grow
// strictly with every new acquisition, by any owner in any process, so a
// store that remembers the largest token it has seen can reject writes from
// a holder that lost the lock. Re-entry returns the token of the hold it
// re-enters.
func FencingToken(ctx context.Context) (uint64, bool) {
	if ctx == nil {
		return 0, false
	}
	v, ok := ctx.Value(ownerKey{}).(*ownerVal)
	if !ok || v.token == 0 {
		return 0, false
	}
	return v.token, true
}

// ownerCtx carries an ownerVal: context.WithValue with the value inline,
// one allocation instead of two on every acquisition.
type ownerCtx struct {
	context.Context
	v ownerVal
}

func withOwnerVal(parent context.Context, v ownerVal) context.Context {
	if parent == nil {
		panic("cannot create context from nil parent") // as context.WithValue
	}
	return &ownerCtx{Context: parent, v: v}
}

func (c *ownerCtx) Value(key any) any {
	if _, ok := key.(ownerKey); ok {
		return &c.v
	}
	return c.Context.Value(key)
}

func (c *ownerCtx) String() string {
	if s, ok := c.Context.(fmt.Stringer); ok {
		return s.String() + ".WithOwner"
	}
	return "dsync.WithOwner"
}

func newOwnerID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// ownerFrom returns the owner ctx carries, adding a fresh one if it has none.
func ownerFrom(ctx context.Context) (context.Context, string) {
	if id, ok := OwnerOf(ctx); ok {
		return ctx, id
	}
	id := newOwnerID()
	return withOwnerVal(ctx, ownerVal{id: id, fresh: true}), id
}

// freshOwner reports whether ctx's owner was made by the acquire call that
// is running with it (see ownerVal.fresh).
func freshOwner(ctx context.Context) bool {
	v, ok := ctx.Value(ownerKey{}).(*ownerVal)
	return ok && v.fresh
}
