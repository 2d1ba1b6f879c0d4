package scripts_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsync/dsync/internal/redistest"
	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

func ints(t *testing.T, r rueidis.RedisResult) []int64 {
	t.Helper()
	v, err := r.AsIntSlice()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func num(t *testing.T, r rueidis.RedisResult) int64 {
	t.Helper()
	v, err := r.AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMutexScripts(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	key, ch := "p:{n}:mutex", "p:{n}:mutex:ch"
	get := func() string {
		v, _ := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
		return v
	}
	acq := func(owner string) []int64 {
		return ints(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key}, []string{owner, "10000", "1"}))
	}
	rel := func(owner string, tok int64) int64 {
		return num(t, scripts.MutexRelease.Exec(ctx, rc, []string{key, ch}, []string{owner, strconv.FormatInt(tok, 10), "60000"}))
	}

	before := time.Now().UnixMicro()
	a := acq("A")
	if a[0] != 1 || a[1] < before {
		t.Fatalf("acquire = %v, want {1, token >= server time %d}", a, before)
	}
	tok := a[1]
	if v := get(); v != "A "+strconv.FormatInt(tok, 10)+" 1" {
		t.Fatalf("value %q", v)
	}
	if r := acq("A"); r[0] != 2 || r[1] != tok {
		t.Fatalf("re-entry = %v", r)
	}
	if r := acq("B"); r[0] != 0 || r[1] <= 0 || r[1] > 10000 {
		t.Fatalf("other owner = %v, want {0, pttl}", r)
	}
	if r := rel("B", tok); r != 0 {
		t.Fatalf("foreign release = %d", r)
	}
	if r := rel("A", tok+1); r != 0 {
		t.Fatalf("release with a wrong token = %d", r)
	}
	if r := rel("A", tok); r != 2 || !strings.HasSuffix(get(), " 1") {
		t.Fatalf("first release = %d, value %q", r, get())
	}
	// The release publishes the token on the channel.
	sub := s.Client(t)
	msgs := make(chan string, 1)
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	subscribed := make(chan struct{})
	go sub.Receive(rueidis.WithOnSubscriptionHook(subCtx, func(rueidis.PubSubSubscription) { close(subscribed) }),
		sub.B().Subscribe().Channel(ch).Build(), func(m rueidis.PubSubMessage) { msgs <- m.Message })
	<-subscribed
	if r := rel("A", tok); r != 1 || get() != "- "+strconv.FormatInt(tok, 10)+" 0" {
		t.Fatalf("last release = %d, value %q", r, get())
	}
	if m := <-msgs; m != strconv.FormatInt(tok, 10) {
		t.Fatalf("published %q", m)
	}
	if pttl := num(t, rc.Do(ctx, rc.B().Pttl().Key(key).Build())); pttl <= 10000 {
		t.Fatalf("free marker ttl %d, want the marker lifetime", pttl)
	}
	// A retried release (reply lost) is a no-op success.
	if r := rel("A", tok); r != 1 {
		t.Fatalf("retried release = %d, want 1", r)
	}
	// The next token continues from the marker.
	b := acq("B")
	if b[0] != 1 || b[1] <= tok {
		t.Fatalf("after the marker: %v, want a token above %d", b, tok)
	}
	// Renew only the exact hold.
	renew := func(prefix string) int64 {
		return num(t, scripts.MutexRenew.Exec(ctx, rc, []string{key}, []string{prefix, "20000"}))
	}
	if renew("A "+strconv.FormatInt(b[1], 10)+" ") != 0 || renew("B "+strconv.FormatInt(tok, 10)+" ") != 0 {
		t.Fatal("renewed a hold that is not the owner's")
	}
	if renew("B "+strconv.FormatInt(b[1], 10)+" ") != 1 || num(t, rc.Do(ctx, rc.B().Pttl().Key(key).Build())) <= 10000 {
		t.Fatal("renewal did not extend the lease")
	}
	// Handoff B -> C: new token, count 1, idempotent on retry.
	hand := func() []int64 {
		return ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{key, ch}, []string{"B", strconv.FormatInt(b[1], 10), "C", "5000", "-1", "60000", "1"}))
	}
	h := hand()
	if h[0] != 1 || h[1] <= b[1] || get() != "C "+strconv.FormatInt(h[1], 10)+" 1" {
		t.Fatalf("handoff = %v, value %q", h, get())
	}
	if h2 := hand(); h2[0] != 1 || h2[1] != h[1] {
		t.Fatalf("retried handoff = %v", h2)
	}
	if r := ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{key, ch}, []string{"X", "1", "D", "5000", "-1", "60000", "1"})); r[0] != 0 {
		t.Fatalf("handoff from a non-holder = %v", r)
	}
	// A handoff is refused while the holder has re-entered (count 2).
	acq("C")
	if r := ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{key, ch}, []string{"C", strconv.FormatInt(h[1], 10), "D", "5000", "-1", "60000", "1"})); r[0] != 0 {
		t.Fatalf("handoff with count 2 = %v", r)
	}
	// With a check, a handoff hands over while only the caller's own
	// subscription (or none) is on the channel, and yields to other
	// subscribers: the lock becomes free and they are told.
	rel("C", 0)                                                                                    // back to count 1
	cur := ints(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key}, []string{"Z", "10000", "1"})) // {0, pttl}: held by C
	if cur[0] != 0 {
		t.Fatalf("C lost the lock: %v", cur)
	}
	tokC := strconv.FormatInt(h[1], 10)
	if r := ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{key, ch}, []string{"C", tokC, "D", "5000", "1", "60000", "1"})); r[0] != 1 {
		t.Fatalf("checked handoff with only the own subscriber (1) = %v, want handed over", r)
	}
	tokD := strconv.FormatInt(ints(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key}, []string{"D", "10000", "1"}))[1], 10)
	rel("D", 0) // undo the re-entry just made to read the token
	if r := ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{key, ch}, []string{"D", tokD, "E", "5000", "0", "60000", "1"})); r[0] != 2 {
		t.Fatalf("checked handoff with a foreign subscriber = %v, want a yield", r)
	}
	if v := get(); v != "- "+tokD+" 0" {
		t.Fatalf("after a yield the value is %q, want the free marker", v)
	}
	if m := <-msgs; m != tokD {
		t.Fatalf("yield published %q", m)
	}
	if r := ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{key, ch}, []string{"D", tokD, "E", "5000", "0", "60000", "1"})); r[0] != 2 {
		t.Fatalf("retried yield = %v", r)
	}
	acq("C")
	acq("C")
	// Reservations: an acquisition reserving 4 tokens records the last, and
	// the next acquisition anywhere starts above it; a handoff reserves too.
	rc.Do(ctx, rc.B().Del().Key("p:{r}:mutex").Build())
	rk := []string{"p:{r}:mutex"}
	r1 := ints(t, scripts.MutexAcquire.Exec(ctx, rc, rk, []string{"R", "10000", "4"}))
	if v, _ := rc.Do(ctx, rc.B().Get().Key(rk[0]).Build()).ToString(); v != "R "+strconv.FormatInt(r1[1]+3, 10)+" 1" {
		t.Fatalf("reserving acquire: %v, value %q", r1, v)
	}
	last := strconv.FormatInt(r1[1]+3, 10)
	h4 := ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{rk[0], "p:{r}:mutex:ch"}, []string{"R", last, "S", "5000", "-1", "60000", "4"}))
	if h4[0] != 1 || h4[1] <= r1[1]+3 {
		t.Fatalf("reserving handoff = %v, want a first token above %d", h4, r1[1]+3)
	}
	if again := ints(t, scripts.MutexHandoff.Exec(ctx, rc, []string{rk[0], "p:{r}:mutex:ch"}, []string{"R", last, "S", "5000", "-1", "60000", "4"})); again[0] != 1 || again[1] != h4[1] {
		t.Fatalf("retried reserving handoff = %v, want %v", again, h4)
	}
	// Token-less release (owner only) works for the owner.
	if rel("C", 0) != 2 || rel("C", 0) != 1 {
		t.Fatal("owner-only releases failed")
	}
	// Without a marker the token comes from the server clock.
	rc.Do(ctx, rc.B().Del().Key(key).Build())
	if r := acq("E"); r[0] != 1 || r[1] <= h[1] {
		t.Fatalf("after DEL: %v, want a token above %d", r, h[1])
	}
}

// TestMutexUndo: an attempt marker makes the undo of a lost acquire reply
// exact in either order: after the acquire it releases exactly that count;
// before it (the acquire still on its way) it makes the acquire a no-op.
func TestMutexUndo(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	key, ch := "p:{u}:mutex", "p:{u}:mutex:ch"
	get := func() string {
		v, _ := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
		return v
	}
	acq := func(marker string) []int64 {
		return ints(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key, marker}, []string{"O", "10000", "1"}))
	}
	undo := func(marker string) int64 {
		return num(t, scripts.MutexUndo.Exec(ctx, rc, []string{key, ch, marker}, []string{"O", "0", "60000"}))
	}
	first := acq(key + ":a:1") // the owner's hold through some Client
	if first[0] != 1 {
		t.Fatalf("acquire = %v", first)
	}
	held := get()
	if r := acq(key + ":a:2"); r[0] != 2 { // re-entry through another
		t.Fatalf("re-entry = %v", r)
	}
	if r := undo(key + ":a:2"); r != 2 {
		t.Fatalf("undo after the acquire = %d, want 2 (count decremented)", r)
	}
	if v := get(); v != held {
		t.Fatalf("after the undo %q, want %q", v, held)
	}
	if r := undo(key + ":a:2"); r != 0 {
		t.Fatalf("repeated undo = %d, want 0", r)
	}
	// The undo overtakes its acquire: the acquire then changes nothing.
	if r := undo(key + ":a:3"); r != 0 {
		t.Fatalf("undo before the acquire = %d, want 0", r)
	}
	if r := acq(key + ":a:3"); r[0] != 0 {
		t.Fatalf("acquire after its undo = %v, want {0, 0}", r)
	}
	if v := get(); v != held {
		t.Fatalf("after the late acquire %q, want %q", v, held)
	}
}

// A block of tokens reserved by an acquisition is recorded in the value,
// but a release (or a yield) records the last token actually issued, so
// the next acquisition continues from it and not from the block's end,
// which may be ahead of the server clock.
func TestMutexReleaseRecordsUsedToken(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	key, ch := "p:{u}:mutex", "p:{u}:mutex:ch"
	get := func() string {
		v, _ := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString()
		return v
	}
	a := ints(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key}, []string{"A", "10000", "1000000"}))
	end := strconv.FormatInt(a[1]+1000000-1, 10)
	if v := get(); v != "A "+end+" 1" {
		t.Fatalf("value %q, want the block's end recorded", v)
	}
	used := strconv.FormatInt(a[1]+2, 10) // two local handoffs happened
	rel := func() int64 {
		return num(t, scripts.MutexRelease.Exec(ctx, rc, []string{key, ch}, []string{"A", end, "60000", used}))
	}
	if r := rel(); r != 1 {
		t.Fatalf("release = %d", r)
	}
	if v := get(); v != "- "+used+" 0" {
		t.Fatalf("free marker %q, want the last token used %s", v, used)
	}
	if r := rel(); r != 1 {
		t.Fatalf("a retried release = %d, want 1 (a no-op)", r)
	}
	if r := num(t, scripts.MutexRelease.Exec(ctx, rc, []string{key, ch}, []string{"A", "0", "60000", "0"})); r != 0 {
		t.Fatalf("an owner-only release of a free lock = %d, want 0", r)
	}
	b := ints(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key}, []string{"B", "10000", "1"}))
	if b[1] <= a[1]+2 || b[1] >= a[1]+1000000-1 {
		t.Fatalf("next token %d: want above the last used %d and from the clock, not past the block's end", b[1], a[1]+2)
	}
}

// TestMutexUndoFresh: for an owner made for one call, the acquire only
// checks its mark (no key is written on a grant), and the undo marks then
// releases: before the acquire arrives it makes the acquire a no-op, after
// it it releases the grant.
func TestMutexUndoFresh(t *testing.T) {
	s := redistest.Start(t)
	rc := s.Client(t)
	ctx := context.Background()
	key, ch := "p:{f}:mutex", "p:{f}:mutex:ch"
	acq := func(owner string) []int64 {
		return ints(t, scripts.MutexAcquire.Exec(ctx, rc, []string{key, key + ":x:" + owner}, []string{owner, "10000", "1", "check"}))
	}
	undo := func(owner string) {
		if err := scripts.MutexUndoFresh.Exec(ctx, rc, []string{key, ch, key + ":x:" + owner}, []string{owner, "0", "60000", "0"}).Error(); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(k string) bool {
		n, err := rc.Do(ctx, rc.B().Exists().Key(k).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	// Acquire first, then the undo: released.
	if r := acq("A"); r[0] != 1 {
		t.Fatalf("acquire = %v", r)
	}
	if exists(key + ":x:A") {
		t.Fatal("a grant in check mode wrote the mark")
	}
	undo("A")
	if r := acq("B"); r[0] != 1 {
		t.Fatalf("after the undo the lock is free: %v", r)
	}
	// The undo first (B still holds), then the late acquire: a no-op, even
	// once the lock is free.
	undo("C")
	if r := num(t, scripts.MutexRelease.Exec(ctx, rc, []string{key, ch}, []string{"B", "0", "60000", "0"})); r != 1 {
		t.Fatalf("B's release = %d", r)
	}
	if r := acq("C"); r[0] != 0 {
		t.Fatalf("a late acquire after its undo = %v, want a no-op", r)
	}
	if v, _ := rc.Do(ctx, rc.B().Get().Key(key).Build()).ToString(); len(v) > 0 && v[0] != '-' {
		t.Fatalf("lock value %q after a no-op acquire, want free", v)
	}
}
