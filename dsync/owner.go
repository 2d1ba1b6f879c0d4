package dsync

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unsafe"
)

type ownerKey struct{}

// ownerVal is what a context carries: the owner, and for a lock context the
// fencing token of the acquisition that returned it.
type ownerVal struct {
	owner string
	token uint64
	// fresh marks an owner made by an acquire call for itself: nobody else
	// knows it until the call returns a lock context carrying it.
	fresh bool
}

// WithOwner returns a copy of ctx carrying a fresh owner, 128 random bits
// that no other client can guess. Acquisitions whose contexts carry the same
// owner re-enter each other's locks. An owner reads "<host>:<pid>/<32 hex
// digits>" (owners a Client makes use its WithClientName), so Inspect and
// the CLI show which process holds a lock.
func WithOwner(ctx context.Context) context.Context {
	return withOwnerVal(ctx, ownerVal{owner: newOwnerID(processName())})
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
	return v.owner, true
}

// FencingToken returns the fencing token of the acquisition whose lock
// context ctx is or derives from. Tokens of one lock name grow strictly with
// every new acquisition, by any owner in any process (see the package doc);
// a re-entry has the token of the hold it re-enters.
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

// newID returns 128 random bits in hex.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// newOwnerID returns "<name>/<newID>", built in one allocation.
func newOwnerID(name string) string { return newOwnerIDAfter("", "", name) }

// newOwnerIDAfter returns key + sep + newOwnerID(name) in one allocation,
// so that a key naming an owner (key + sep being the rest of the key) and
// the owner, its suffix, share it.
func newOwnerIDAfter(key, sep, name string) string {
	b := newOwnerBuf(key, sep, name, 0)
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// newOwnerBuf returns the bytes of newOwnerIDAfter(key, sep, name) with
// room for spare more bytes after them: a string made of the bytes returned
// stays as it is when appends fill that room (see ownerTag).
func newOwnerBuf(key, sep, name string, spare int) []byte {
	var r [16]byte
	_, _ = rand.Read(r[:])
	b := make([]byte, 0, len(key)+len(sep)+len(name)+1+hex.EncodedLen(len(r))+spare)
	b = append(b, key...)
	b = append(b, sep...)
	b = append(b, name...)
	b = append(b, '/')
	return hex.AppendEncode(b, r[:])
}

// ownerTagRoom is the room newOwnerBuf leaves for ownerTag: a space, a
// token's digits, a space and a count of 1.
const ownerTagRoom = 3 + 20

// ownerTag appends " <token> 1" to b, the bytes of a fresh owner made by
// newOwnerBuf with ownerTagRoom to spare after the owner, which starts at
// b[from:], and returns the hold's renewal value "<owner> <token> 1" (see
// hold.renewValue, which the release sends) without an allocation:
// its bytes follow the owner's in the same array, written only now and
// never again.
//
// Each buffer takes one ownerTag: a second would overwrite the first's.
func ownerTag(b []byte, from int, token uint64) string {
	if cap(b)-len(b) < ownerTagRoom {
		return string(b[from:]) + " " + strconv.FormatUint(token, 10) + " 1"
	}
	b = append(b, ' ')
	b = strconv.AppendUint(b, token, 10) // at most 20 digits: in place
	b = append(b, ' ', '1')
	return unsafe.String(&b[from], len(b)-from)
}

// processName is the default name of owners: "<host>:<pid>".
var processName = sync.OnceValue(func() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	return ownerName(host + ":" + strconv.Itoa(os.Getpid()))
})

// ownerName makes name fit in an owner: scripts split values on spaces,
// and a brace could look like a hash tag, so spaces, control characters,
// '/', '{' and '}' become '_'; it is cut at 64 bytes.
func ownerName(name string) string {
	if len(name) > 64 {
		name = name[:64]
	}
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r == 0x7f || r == '/' || r == '{' || r == '}' || unicode.IsSpace(r) {
			return '_'
		}
		return r
	}, name)
}

// ownerFrom returns the owner ctx carries, adding a fresh one named name if
// it has none.
func ownerFrom(ctx context.Context, name string) (context.Context, string) {
	if id, ok := OwnerOf(ctx); ok {
		return ctx, id
	}
	id := newOwnerID(name)
	return withOwnerVal(ctx, ownerVal{owner: id, fresh: true}), id
}

// freshOwner reports whether ctx's owner was made by the acquire call that
// is running with it (see ownerVal.fresh).
func freshOwner(ctx context.Context) bool {
	v, ok := ctx.Value(ownerKey{}).(*ownerVal)
	return ok && v.fresh
}
