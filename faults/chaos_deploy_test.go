package faults

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
)

// Deploys, a fault class of scenario 1 (issue 25): a child process closes
// its Client gracefully (Client.Close) whatever its workers are doing —
// holding, waiting, observing an Election, inside a Once's or Group's f —
// and opens a new one, on which the workers go on. The parent asks for a
// deploy with SIGUSR1; the child answers with a "deploy" line once the new
// Client is open, saying when the Close began and returned and what of the
// closed Client it found in Redis right after Close returned (nothing may
// be left: its holds, queue places, waiting entries, grants, hold tags).
// The parent checks that no waiter of another Client waited more than
// deployBound beyond the moment the lock became free (deployStalls).

// deployBound is the bound on the stall a Close may cause.
const deployBound = 100 * time.Millisecond

// A chaosGen is one Client of a chaos child, from its opening to its Close.
type chaosGen struct {
	c     *dsync.Client
	n     int
	name  string // its WithClientName, in the owners it makes and its hold tags
	ident string // "<name>/<id>", the id being in its wait ids (probeIdent)
	// next is closed once the next Client is open; closeStart and
	// closeEnd (unix ns) are set before.
	next                 chan struct{}
	closeStart, closeEnd int64
	// closing is set (unix ns) just before Close is called (closeStart,
	// set later, is not read before next is closed): see cutBy.
	closing atomic.Int64
	mu      sync.Mutex
	owners  map[string]bool // the random part of the owners made for calls on this Client
	own     rueidis.Client  // its own rueidis client (chaosDeploy.dial), closed after it
}

// ownerCtx is dsync.WithOwner(ctx), the owner noted as one of g's.
func (g *chaosGen) ownerCtx(ctx context.Context) context.Context {
	ctx = dsync.WithOwner(ctx)
	if g == nil {
		return ctx
	}
	o, _ := dsync.OwnerOf(ctx)
	_, id, _ := strings.Cut(o, "/")
	g.mu.Lock()
	g.owners[id] = true
	g.mu.Unlock()
	return ctx
}

// closed reports whether err, or the cause of ctx, says g's Client was
// closed; it then waits for the next Client (so closeEnd is set).
func (g *chaosGen) closed(err error, ctx context.Context) bool {
	if g == nil {
		return false
	}
	if !errors.Is(err, dsync.ErrClosed) && (ctx == nil || !errors.Is(context.Cause(ctx), dsync.ErrClosed)) {
		return false
	}
	<-g.next
	return true
}

// cutBy reports whether g's Client began to close by t (unix ns), the
// return of a Once's or Group's Do that ran f; it then waits for the next
// Client, as closed does. Such a run may have been ended in Redis by
// Close while f still ran, whatever Do returned and whatever f's context
// says: Close does not wait for f, it releases the run as failed (the
// next caller, in any process, runs f) and cancels f's lock context
// (Client.Close's documentation). When the caller's own context had ended
// f's context first, its cause stays the caller's (not ErrClosed), and Do
// returns f's own result (a Group's leader) or the one recorded (a Once):
// nothing but the time of Close tells the worker that its run was cut
// (dsync's TestGroupCloseCutsRunAfterCtx). The run was valid until f last
// checked its context (lastValid), and ended in Redis by the time both
// Do and Close returned. A Close that began after Do returned cannot have
// cut the run: Do ends its run in Redis before it returns.
func (g *chaosGen) cutBy(t int64) bool {
	if g == nil {
		return false
	}
	if s := g.closing.Load(); s == 0 || s > t {
		return false
	}
	<-g.next
	return true
}

// chaosDeploy is a child's succession of Clients.
type chaosDeploy struct {
	slot   int
	rc     rueidis.Client
	prefix string
	lease  time.Duration
	prober *dsync.Client  // finds each Client's id (probeIdent)
	sig    chan os.Signal // SIGUSR1: deploy (run)
	cur    atomic.Pointer[chaosGen]
	n      int
	// trap, when set, catches the next worker inside its critical section
	// (a hold, an Election's term, a Once's or Group's f): it says so on
	// sprung and stays there until its lock context ends, so that the
	// deploy's Close strikes a holder inside (trapped).
	trap   atomic.Bool
	sprung chan struct{}
	// scan, when set, are the hash tags of the only names this process's
	// workers use ("{c0}"): leftBy reads their keys (and the probes')
	// instead of every key under the prefix (the soak's: tens of
	// thousands of Once keys, read one by one through the proxy right
	// after the Close, the scan took over 10 s and loaded the process and
	// the proxy whose waiters the deploy's window measures).
	scan []string
	// scanned, when set, is called by leftBy with the keys its scan found,
	// before it reads any of them again (a check's test lets keys expire
	// there).
	scanned func([]leftKey)
	// dial, when set, makes each Client's own rueidis client (the network
	// rows: a new connection through the proxy per Client), closed after
	// the Client's Close; rc then serves only the prober and leftBy.
	dial func() (rueidis.Client, error)
}

// trapped holds the worker with lock context lctx inside its critical
// section while a deploy is armed to strike there, until Close ends lctx
// (or 5 s pass). Then it goes on, as a holder whose process paused
// there would: its write with its token must meet the fence.
func (d *chaosDeploy) trapped(lctx context.Context) {
	if d == nil || !d.trap.CompareAndSwap(true, false) {
		return
	}
	d.sprung <- struct{}{}
	select {
	case <-lctx.Done():
	case <-time.After(5 * time.Second):
	}
}

// A deployNote is what the child says of one deploy.
type deployNote struct {
	Gen   int      `json:"gen"`
	Name  string   `json:"name"`
	Ident string   `json:"ident"`
	Start int64    `json:"start"` // Close called
	End   int64    `json:"end"`   // Close returned
	Err   string   `json:"err,omitempty"`
	Left  []string `json:"left,omitempty"` // what of the closed Client Redis still had
	Open  int64    `json:"open"`           // ns to open the next Client
	// Inside: Close struck a worker trapped inside its critical section.
	Inside bool `json:"inside,omitempty"`
	// GaveUp: no next Client could be opened within deployOpenWithin.
	GaveUp bool `json:"gaveUp,omitempty"`
	// OpenFails: the failed attempts to open the next Client, before
	// one that succeeded (or GaveUp).
	OpenFails []openFail `json:"openFails,omitempty"`
	// Quiet: no other fault struck near it (set by the parent); only a
	// quiet deploy's stall is measured.
	Quiet bool `json:"-"`
	Slot  int  `json:"-"`
	// Before: the fault that struck before it and how long before its
	// Close it ended (set by the soak, which strikes one at a time);
	// printed beside a stretch over deployBound.
	Before string `json:"-"`
}

func newChaosDeploy(slot int, rc rueidis.Client, prefix string, lease time.Duration) (*chaosDeploy, error) {
	return newChaosDeployDial(slot, rc, nil, prefix, lease)
}

// newChaosDeployDial is newChaosDeploy whose Clients each have their own
// rueidis client from dial (nil: rc, as newChaosDeploy).
func newChaosDeployDial(slot int, rc rueidis.Client, dial func() (rueidis.Client, error), prefix string, lease time.Duration) (*chaosDeploy, error) {
	d := &chaosDeploy{slot: slot, rc: rc, dial: dial, prefix: prefix, lease: lease, sprung: make(chan struct{}, 1)}
	var err error
	d.prober, err = dsync.NewClient(rc, dsync.WithKeyPrefix(prefix), dsync.WithLease(lease), dsync.WithClientName(fmt.Sprintf("prober%d", slot)))
	if err != nil {
		return nil, err
	}
	g, err := d.open()
	if err != nil {
		d.prober.Close()
		return nil, err
	}
	d.cur.Store(g)
	return d, nil
}

// listen catches SIGUSR1 for run from now on: a child calls it before it
// says it is ready for a deploy (before, run caught the signal once its
// goroutine ran, which could be after "ready": a SIGUSR1 then killed the
// process). Never stopped: a SIGUSR1 after the end must not kill the
// process.
func (d *chaosDeploy) listen() {
	d.sig = make(chan os.Signal, 1)
	signal.Notify(d.sig, syscall.SIGUSR1)
}

func (d *chaosDeploy) gen() *chaosGen {
	if d == nil {
		return nil
	}
	return d.cur.Load()
}

// open opens the next Client, named chaos<slot>g<n>, with a hold tag that
// names it, and finds its id.
func (d *chaosDeploy) open() (*chaosGen, error) {
	name := fmt.Sprintf("chaos%dg%d", d.slot, d.n)
	d.n++
	probe := "probe" + name
	obs := dsync.Observer{HoldTag: func(_ context.Context, e dsync.AcquireDone) string {
		if strings.HasPrefix(e.Name, "probe") {
			return ""
		}
		return "tag of " + name
	}, Released: noteReleased, AcquireDone: noteAcquired}
	rc := d.rc
	var own rueidis.Client
	if d.dial != nil {
		var err error
		if own, err = d.dial(); err != nil {
			return nil, dialError{err}
		}
		rc = own
	}
	c, err := dsync.NewClient(rc, dsync.WithKeyPrefix(d.prefix), dsync.WithLease(d.lease), dsync.WithClientName(name), dsync.WithObserver(obs))
	if err != nil {
		if own != nil {
			own.Close()
		}
		return nil, err
	}
	g := &chaosGen{c: c, n: d.n - 1, name: name, next: make(chan struct{}), owners: map[string]bool{}, own: own}
	g.ident, err = d.probeIdent(c, probe)
	if err != nil {
		c.Close()
		if own != nil {
			own.Close()
		}
		return nil, err
	}
	return g, nil
}

// probeIdent finds c's "<name>/<id>" (its id is in its wait ids, which name
// no owner) without disturbing the other Clients of the run: the prober
// holds a Mutex, c waits for it, and the prober's Inspect lists c's entry
// in the Mutex's waiting count, "<name>/<id>"; then the prober lets go and
// c's wait returns. (A force release that c's answer names, as before,
// published on the control channel that every Client of the prefix
// reads: each of them checked its holds in Redis and answered, a burst of
// work that the soak's waiters felt, in the deploy's window.)
func (d *chaosDeploy) probeIdent(c *dsync.Client, name string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	held, err := d.prober.NewMutex(name).LockContext(ctx)
	if err != nil {
		return "", fmt.Errorf("probe: %w", err)
	}
	waited := make(chan error, 1)
	unlocked := false
	defer func() {
		if !unlocked {
			_ = d.prober.NewMutex(name).UnlockContext(held)
			<-waited
		}
	}()
	go func() {
		m := c.NewMutex(name)
		lctx, err := m.LockContext(ctx)
		if err == nil {
			err = m.UnlockContext(lctx)
		}
		waited <- err
	}()
	want := strings.TrimPrefix(name, "probe") + "/"
	var ident string
	for ident == "" {
		sts, err := d.prober.Inspect(ctx, name)
		if err != nil {
			return "", fmt.Errorf("probe: %w", err)
		}
		for _, st := range sts {
			for _, w := range st.Waiters {
				if strings.HasPrefix(w.Owner, want) {
					ident = w.Owner
				}
			}
		}
		if ident == "" {
			select {
			case err := <-waited:
				waited <- err // for the deferred unlock
				return "", fmt.Errorf("probe: the wait ended before it was seen: %v", err)
			case <-ctx.Done():
				return "", fmt.Errorf("probe: no waiting entry of %s seen", want)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	unlocked = true
	if err := d.prober.NewMutex(name).UnlockContext(held); err != nil {
		<-waited
		return "", fmt.Errorf("probe: %w", err)
	}
	if err := <-waited; err != nil {
		return "", fmt.Errorf("probe: %w", err)
	}
	return ident, nil
}

// releasedKey marks a context whose lock's release returned (Observer.
// Released, called once the release's round trip or local handoff is
// done) is noted: a Cond's Wait releases its lock inside the call, and
// its waiter learns when from the note (withReleased).
type releasedKey struct{}

// withReleased returns ctx with a note of when a hold acquired under it
// (its lock context derives from ctx) was last released.
func withReleased(ctx context.Context) (context.Context, *atomic.Int64) {
	at := new(atomic.Int64)
	return context.WithValue(ctx, releasedKey{}, at), at
}

func noteReleased(ctx context.Context, e dsync.Released) {
	if at, ok := ctx.Value(releasedKey{}).(*atomic.Int64); ok && e.Complete {
		at.Store(now())
	}
}

// acquiredKey marks a context whose acquisitions' holds are noted by lock
// name (withAcquired): when each began, AcquireDone.HeldSince (its
// reply's arrival, or a local handoff's), earlier than its call's return,
// which comes after the observer's own work (its blockers' read from
// Redis, a round trip). deployStalls starts a hold there: a waiter that
// got the lock was not waiting for a free lock while its call finished
// (in the soak, 20-70 ms on a loaded machine, counted as the lock's being
// free).
type acquiredKey struct{}

// acquiredAt is when each lock acquired under a context was last held
// (unix ns, by lock name), and with how many attempts.
type acquiredAt struct {
	mu sync.Mutex
	m  map[string]acquired
}

// acquired is the last acquisition of a name under an acquiredAt: when
// its hold began and AcquireDone.Attempts (0: handed on inside its
// Client, or re-entered); zero, seen false, when there was none.
type acquired struct {
	at       int64
	attempts int
	seen     bool
}

// withAcquired returns ctx with a note of when its acquisitions ended
// with the lock.
func withAcquired(ctx context.Context) (context.Context, *acquiredAt) {
	a := &acquiredAt{m: map[string]acquired{}}
	return context.WithValue(ctx, acquiredKey{}, a), a
}

func noteAcquired(ctx context.Context, e dsync.AcquireDone) {
	if a, ok := ctx.Value(acquiredKey{}).(*acquiredAt); ok && e.Acquired {
		t := now()
		if !e.HeldSince.IsZero() {
			t = e.HeldSince.UnixNano()
		}
		a.mu.Lock()
		a.m[e.Name] = acquired{at: t, attempts: e.Attempts, seen: true}
		a.mu.Unlock()
	}
}

// of is name's last acquisition under the note.
func (a *acquiredAt) of(name string) acquired {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.m[name]
}

// only is the acquisition of the one lock acquired under the note (not
// seen: none, or several: a MultiLock's, see of).
func (a *acquiredAt) only() acquired {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.m) != 1 {
		return acquired{}
	}
	for _, g := range a.m {
		return g
	}
	return acquired{}
}

// deploy closes the current Client, looks in Redis for what it left, opens
// the next one and lets the workers go on.
func (d *chaosDeploy) deploy(inside bool) deployNote {
	g := d.cur.Load()
	n := deployNote{Gen: g.n, Name: g.name, Ident: g.ident}
	if inside {
		// Strike a worker inside its critical section, if one comes
		// within a lease.
		d.trap.Store(true)
		select {
		case <-d.sprung:
			n.Inside = true
		case <-time.After(d.lease):
			if !d.trap.CompareAndSwap(true, false) {
				<-d.sprung
				n.Inside = true
			}
		}
	}
	g.closing.Store(now())
	n.Start = now()
	err := g.c.Close()
	n.End = now()
	if err != nil {
		n.Err = err.Error()
	}
	if g.own != nil {
		g.own.Close()
	}
	n.Left = d.leftBy(g)
	// The next Client, tried again while Redis cannot be reached (a
	// fault may strike just then), for deployOpenWithin at most: a
	// process that cannot open one in that time gives up (run exits), as
	// a real replica would be restarted.
	t0 := now()
	for deadline := time.Now().Add(deployOpenWithin); ; {
		a := now()
		ng, err := d.open()
		if err == nil {
			d.cur.Store(ng)
			break
		}
		n.OpenFails = append(n.OpenFails, openFail{From: a, To: now(), Err: err.Error(), Dial: errors.As(err, new(dialError))})
		if time.Now().After(deadline) {
			n.Err += fmt.Sprintf("; opening the next Client: gave up after %v (%d attempts, the last: %v)", deployOpenWithin, len(n.OpenFails), err)
			n.GaveUp = true
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.Open = now() - t0
	g.closeStart, g.closeEnd = n.Start, n.End
	close(g.next)
	return n
}

// deployOpenWithin bounds the opening of the next Client after a deploy:
// less than the parents' 20 s wait for a deploy's answer.
const deployOpenWithin = 15 * time.Second

// run deploys on every SIGUSR1 (see listen) until stop is closed.
func (d *chaosDeploy) run(stop <-chan struct{}) {
	for {
		select {
		case <-d.sig:
			n := d.deploy(rand.IntN(2) == 0)
			say("deploy", n)
			if n.GaveUp {
				// No Client to go on with: the process ends, as a
				// replica that cannot start does (the parent sees it
				// exit, and the test's log says why).
				fmt.Fprintf(os.Stderr, "chaos child %d: exits: a deploy could not open the next Client: %s\n", d.slot, n.Err)
				os.Exit(3)
			}
		case <-stop:
			return
		}
	}
}

// close closes the last Client and the prober.
func (d *chaosDeploy) close() {
	g := d.cur.Load()
	g.closing.Store(now())
	g.c.Close()
	g.closeEnd = now()
	if g.own != nil {
		g.own.Close()
	}
	close(g.next)
	d.prober.Close()
}

var hex32 = regexp.MustCompile(`[0-9a-f]{32}`)

// identID is the id in a Client's "<name>/<id>" (the whole if no name).
func identID(ident string) string {
	if _, after, ok := strings.Cut(ident, "/"); ok {
		return after
	}
	return ident
}

// leftScan reads one page of SCAN (ARGV[1] the cursor, ARGV[2] the
// pattern, count 100) and returns the next cursor, then, for each key of
// the page whose name, string value, hash fields and values, or list, set
// or sorted set members contain one of the ARGV[3] needles that follow it
// (ARGV[4..]) or a 32-hex-digit run (as hex32 finds them) that is one of
// the rest of ARGV (owners): the key, its type, its PTTL and its value (a
// string's; "" for the other types). One script call, so that what it
// returns is the keys' state at one instant: a key the check reads again
// later may have expired meanwhile (an undo's tombstone at the end of its
// minute, read after the whole scan, looked like a key left without a
// value: see leftBy). Pages of 100 keys: the script blocks Redis while it
// runs, and it runs inside the deploy's window (deployWindow), beside the
// waiters whose stall is measured: each command of a waiter that arrives
// meanwhile waits for the page. A CI run of c567d10 failed a OnceValue
// deploy of the soak with a waiter 127 ms beyond the name's being free,
// 102-228 ms after the Close (17 ms long), most likely while the scan,
// which begins as Close returns, ran (that run did not time its pages).
// Measured 2026-12-04 (SLOWLOG): on an idle Redis with 30,000 keys, a
// page of 1,000 keys took 5-13 ms and one of 100 keys 0.5-3.3 ms (0 to
// 10,000 owners: building their table is most of a short page); in
// 2-minute soaks on the shared 2-core machine, pages of 1,000 keys took
// 10-23 ms each (36 of 38 over 5 ms) and pages of 100 keys at most 11.7
// ms (69 of 414 over 5 ms).
var leftScan = rueidis.NewLuaScript(`
local page = redis.call('scan', ARGV[1], 'match', ARGV[2], 'count', 100)
local n = tonumber(ARGV[3])
local owners = {}
for i = n + 4, #ARGV do owners[ARGV[i]] = true end
local function hit(s)
  for i = 4, n + 3 do
    if ARGV[i] ~= '' and string.find(s, ARGV[i], 1, true) then return true end
  end
  for run in string.gmatch(s, '[0-9a-f]+') do
    for j = 1, #run - 31, 32 do
      if owners[string.sub(run, j, j + 31)] then return true end
    end
  end
  return false
end
local out = {page[1]}
for _, k in ipairs(page[2]) do
  local found = hit(k)
  local t = redis.call('type', k)['ok']
  local vals = {}
  if t == 'string' then
    vals = {redis.call('get', k)}
  elseif not found then
    if t == 'hash' then
      local h = redis.call('hgetall', k)
      for i = 1, #h, 2 do vals[#vals + 1] = h[i] .. '=' .. h[i + 1] end
    elseif t == 'list' then
      vals = redis.call('lrange', k, 0, -1)
    elseif t == 'zset' then
      vals = redis.call('zrange', k, 0, -1)
    elseif t == 'set' then
      vals = redis.call('smembers', k)
    end
  end
  if not found then
    for _, v in ipairs(vals) do
      if hit(v) then found = true break end
    end
  end
  if found then
    local v = ''
    if t == 'string' then v = vals[1] end
    out[#out + 1] = k
    out[#out + 1] = t
    out[#out + 1] = tostring(redis.call('pttl', k))
    out[#out + 1] = v
  end
end
return out
`)

// leftKey is a key leftScan found, as it was at the scan.
type leftKey struct {
	key, typ string
	pttl     int64  // ms; -1: no expiry
	val      string // a string's value
}

// leftCandidates is leftScan over every key matching the patterns, a page
// a call.
func (d *chaosDeploy) leftCandidates(ctx context.Context, patterns, needles, owners []string) ([]leftKey, error) {
	args := append([]string{"0", "", strconv.Itoa(len(needles))}, needles...)
	args = append(args, owners...)
	var out []leftKey
	for _, p := range patterns {
		args[0], args[1] = "0", p
		for {
			r, err := leftScan.Exec(ctx, d.rc, nil, args).AsStrSlice()
			if err != nil {
				return nil, err
			}
			if len(r) == 0 || (len(r)-1)%4 != 0 {
				return nil, fmt.Errorf("leftScan: a reply of %d values", len(r))
			}
			for i := 1; i < len(r); i += 4 {
				pttl, err := strconv.ParseInt(r[i+2], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("leftScan: PTTL %q of %s", r[i+2], r[i])
				}
				out = append(out, leftKey{key: r[i], typ: r[i+1], pttl: pttl, val: r[i+3]})
			}
			if args[0] = r[0]; args[0] == "0" {
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b leftKey) int { return strings.Compare(a.key, b.key) })
	return slices.CompactFunc(out, func(a, b leftKey) bool { return a.key == b.key }), nil
}

// leftBy lists the keys under the prefix that name g's Client (its name,
// in its waiting entries and hold tags; its id, in its wait ids) or an
// owner it made, with what names it: nothing may be left once its Close
// returned. As in dsync's TestRollingRestart, not the Client's state: an
// Election's record (history: the owners of past terms) and the
// tombstones of attempts taken back, which make an acquire of that attempt
// that arrives late a no-op, each kept a minute at most: the undo marks of
// the locks' attempts (<lock>:x:<owner> for an owner made for the call,
// <lock>:a:<attempt> set to "x" for one the caller brought), a
// Semaphore's undone waiters, a Once's and a Group's undone calls (each
// with its expiry). A tombstone kept
// longer is reported.
func (d *chaosDeploy) leftBy(g *chaosGen) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	patterns := []string{d.prefix + ":*"}
	if len(d.scan) > 0 {
		patterns = []string{d.prefix + ":{probe*"}
		for _, tag := range d.scan {
			patterns = append(patterns, d.prefix+":"+tag+":*")
		}
	}
	g.mu.Lock()
	owners := make([]string, 0, len(g.owners))
	for o := range g.owners {
		owners = append(owners, o)
	}
	g.mu.Unlock()
	// SCAN, not KEYS: the soak's prefix holds tens of thousands of keys
	// (its Onces), and one KEYS would block Redis for all of them. Only
	// the keys whose name or content names g (its name, tag, id or an
	// owner it made) come back: Redis picks them out (leftScan), a SCAN
	// page of 100 keys a call, each with its type, PTTL and value as
	// they were in that call.
	keys, err := d.leftCandidates(ctx, patterns, []string{g.name + "/", "tag of " + g.name, identID(g.ident)}, owners)
	if err != nil {
		return []string{"leftScan: " + err.Error()}
	}
	if d.scanned != nil {
		d.scanned(keys)
	}
	// The server's time, once: undone entries are scored with their
	// expiry (ms, server time).
	var serverMS int64
	serverTime := func() (int64, error) {
		if serverMS != 0 {
			return serverMS, nil
		}
		tm, err := d.rc.Do(ctx, d.rc.B().Time().Build()).AsStrSlice()
		var sec int64
		if err == nil && len(tm) > 0 {
			sec, err = strconv.ParseInt(tm[0], 10, 64)
		}
		serverMS = sec * 1000
		return serverMS, err
	}
	id := identID(g.ident)
	g.mu.Lock()
	defer g.mu.Unlock()
	var left []string
	mark := func(k, s string) {
		hit := strings.Contains(s, g.name+"/") || strings.Contains(s, "tag of "+g.name) || (id != "" && strings.Contains(s, id))
		if !hit {
			for _, h := range hex32.FindAllString(s, -1) {
				if g.owners[h] {
					hit = true
					break
				}
			}
		}
		if hit {
			left = append(left, fmt.Sprintf("%q: %q", k, s))
		}
	}
	for _, lk := range keys {
		k := lk.key
		if strings.HasSuffix(k, "}:election") {
			continue
		}
		if strings.HasSuffix(k, ":taghist") {
			// A lock's history of ended holds (dsync's Observer.HoldTag),
			// "<end µs> <start µs> <tag>": a record of holds that have
			// ended, Close or not, each kept a minute after its end at
			// most (the Clients' clocks: this machine's); an older one is
			// reported.
			hist, _ := d.rc.Do(ctx, d.rc.B().Lrange().Key(k).Start(0).Stop(-1).Build()).AsStrSlice()
			oldest := time.Now().Add(-time.Minute - time.Second).UnixMicro()
			for _, v := range hist {
				end, _, _ := strings.Cut(v, " ")
				if us, err := strconv.ParseInt(end, 10, 64); err != nil || us < oldest {
					mark(k, v+" (kept over a minute)")
				}
			}
			continue
		}
		if strings.HasSuffix(k, ":sem:undone") || strings.HasSuffix(k, ":run:undone") || strings.Contains(k, ":group:u:") {
			// Undone calls and waiters, each scored with its expiry (ms,
			// server time); the key itself may live longer.
			nowMS, err := serverTime()
			if err != nil {
				left = append(left, fmt.Sprintf("TIME failed: %v", err))
				continue
			}
			upto := float64(nowMS + time.Minute.Milliseconds())
			zs, _ := d.rc.Do(ctx, d.rc.B().Zrange().Key(k).Min("0").Max("-1").Withscores().Build()).AsZScores()
			for _, z := range zs {
				if z.Score > upto {
					mark(k, fmt.Sprintf("%s (kept until %.0f)", z.Member, z.Score))
				}
			}
			continue
		}
		// A tombstone, as the scan saw it (not read again: one at the end
		// of its minute may expire before a second read, which then finds
		// nothing and cannot tell what the key was). A PTTL of 0 is a key
		// that Redis 7.0 still had with under 1 ms left.
		tomb := strings.Contains(k, ":x:") || (strings.Contains(k, ":a:") && lk.typ == "string" && lk.val == "x")
		if tomb && lk.pttl >= 0 && lk.pttl <= time.Minute.Milliseconds() {
			continue
		}
		typ := lk.typ
		if typ == "string" {
			mark(k, fmt.Sprintf("%s = %q, PTTL %d ms", k, lk.val, lk.pttl))
		} else {
			mark(k, fmt.Sprintf("%s (%s, PTTL %d ms)", k, typ, lk.pttl))
		}
		var vals []string
		switch typ {
		case "hash":
			m, _ := d.rc.Do(ctx, d.rc.B().Hgetall().Key(k).Build()).AsStrMap()
			for f, v := range m {
				vals = append(vals, f+"="+v)
			}
		case "list":
			vals, _ = d.rc.Do(ctx, d.rc.B().Lrange().Key(k).Start(0).Stop(-1).Build()).AsStrSlice()
		case "zset":
			vals, _ = d.rc.Do(ctx, d.rc.B().Zrange().Key(k).Min("0").Max("-1").Build()).AsStrSlice()
		case "set":
			vals, _ = d.rc.Do(ctx, d.rc.B().Smembers().Key(k).Build()).AsStrSlice()
		}
		for _, v := range vals {
			mark(k, v)
		}
	}
	slices.Sort(left)
	return left
}

// deployWindow is how long after a Close returned a lock that became free
// is still counted as the deploy's: the monkey strikes next at least 500
// ms after a deploy's answer, so nothing else delays a waiter there but
// the deploy's own check of what the Client left (leftScan, in short pages).
const deployWindow = 400 * time.Millisecond

// A deployStall is the longest a waiter of another Client waited, around
// one deploy, beyond the moment the lock it waited for became free.
type deployStall struct {
	note   deployNote
	stall  int64  // ns
	waiter string // who, and on what
	// over: every free stretch over deployBound (the worst is stall),
	// each weighed against the probes' lag by excuseStalls.
	over []overStretch
	gaps int // free stretches measured in the window
	cut  int // holds (runs) the Close ended
	// measured: the kind has a stall measure.
	measured bool
	// wg: a WaitGroup's (the counter's being zero for the lock's being
	// free); unknown: how many of its names' counters were unknown at
	// the deploy's start (wgZeros).
	wg      bool
	unknown int
}

// overStretch is a free stretch of a waiter (of process slot slot) over
// deployBound.
type overStretch struct {
	slot     int
	from, to int64
	waiter   string
	lag      int64 // ns: the probes' lag within it (excuseStalls)
	excused  bool  // the lag covers its excess over deployBound
}

// openFail is a failed attempt to open a deploy's next Client.
type openFail struct {
	From int64  `json:"from"`
	To   int64  `json:"to"`
	Err  string `json:"err"`
	// Dial: it was the harness's own rueidis client (through the proxy,
	// chaosDeploy.dial) that failed, not dsync's NewClient nor the
	// probe of its id.
	Dial    bool  `json:"dial,omitempty"`
	lag     int64 // ns: the probes' lag within it (excuseStalls)
	excused bool
}

// dialError is the failure of chaosDeploy.dial.
type dialError struct{ err error }

func (e dialError) Error() string { return "its rueidis client: " + e.err.Error() }
func (e dialError) Unwrap() error { return e.err }

// wgZero is a stretch in which a WaitGroup's counter was known to be zero:
// from the return of the Done (worker who, process slot) that made it so
// to the call of the next Add.
type wgZero struct {
	from, to  int64
	who, slot int
}

// wgZeros finds, per WaitGroup name, the stretches in which its counter
// was known to be zero, and those in which it was unknown. The Adds of a
// name, by their call, fall into runs of Adds whose calls overlap (their
// order in Redis unknown); after a run the counter is the sum of the
// deltas applied so far (an Add that returned ok applied its delta, one
// refused, ErrInvalidArgument, none), and if that is zero and the run
// applied a Done, a zero stretch lasts from the run's last return to the
// next Add's call. An Add whose outcome is unknown (Out "err": a Close or
// a Redis error in it; an "addc" without its "add": its process killed)
// makes the counter unknown from its call until a wipe (FLUSHALL, a
// restart without persistence) that no Add overlaps resets it to zero.
func wgZeros(all []cev, wipes []wipe) (zeros map[int][]wgZero, unknown map[int][][2]int64) {
	type item struct {
		call, ret int64
		delta     int64
		unknown   bool
		wipe      bool
		who, slot int
	}
	adds := map[int64]cev{}
	for _, e := range all {
		if e.Op == "add" {
			adds[e.Seq] = e
		}
	}
	items := map[int][]item{}
	var ks []int
	for _, e := range all {
		if e.Op != "addc" {
			continue
		}
		if _, ok := items[e.K]; !ok {
			ks = append(ks, e.K)
		}
		it := item{call: e.Call, ret: math.MaxInt64, unknown: true, who: e.Who, slot: e.Slot}
		if a, ok := adds[e.Seq]; ok {
			it.ret = a.Ret
			switch a.Out {
			case "ok":
				it.delta, it.unknown = a.N, false
			case "inval":
				it.unknown = false
			}
		}
		items[e.K] = append(items[e.K], it)
	}
	zeros, unknown = map[int][]wgZero{}, map[int][][2]int64{}
	for _, k := range ks {
		its := items[k]
		for _, w := range wipes {
			its = append(its, item{call: w.from, ret: w.to, wipe: true})
		}
		slices.SortStableFunc(its, func(a, b item) int { return cmp.Compare(a.call, b.call) })
		var sum int64
		known := true
		unknownFrom := int64(0)
		for i := 0; i < len(its); {
			// One run: the items whose calls come before the run's last
			// return.
			end, done, mixed, wiped := its[i].ret, false, false, false
			last := its[i]
			j := i
			for ; j < len(its) && (j == i || its[j].call < end); j++ {
				it := its[j]
				end = max(end, it.ret)
				switch {
				case it.wipe:
					wiped = true
				case it.unknown:
					mixed = true
				default:
					sum += it.delta
					if it.delta < 0 {
						done, last = true, it
					}
				}
			}
			if wiped && j-i > 1 {
				mixed = true // an Add overlapped the wipe
			}
			switch {
			case mixed && known:
				known, unknownFrom = false, its[i].call
			case wiped && !mixed:
				if !known {
					unknown[k] = append(unknown[k], [2]int64{unknownFrom, end})
				}
				known, sum, done = true, 0, false
			}
			if known && sum == 0 && done && end != math.MaxInt64 {
				next := int64(math.MaxInt64)
				if j < len(its) {
					next = its[j].call
				}
				zeros[k] = append(zeros[k], wgZero{from: end, to: next, who: last.who, slot: last.slot})
			}
			i = j
		}
		if !known {
			unknown[k] = append(unknown[k], [2]int64{unknownFrom, math.MaxInt64})
		}
	}
	return zeros, unknown
}

// condLockWaits is a Cond history as the lock's waits: an acquisition
// that a Wait made once woken (Wake) wanted the lock from the signal that
// woke it, not from its Wait's call. Which signal that was is not known:
// the latest made (Signal or Broadcast, in any process) between its call
// and its return is taken, so that its wait is never counted longer than
// it was (one with no signal in between is not counted).
func condLockWaits(all []cev) []cev {
	var sigs []int64 // returns of the signals made
	for _, e := range all {
		if e.Op == "cs" && e.Out == "ok" {
			sigs = append(sigs, e.Ret)
		}
	}
	slices.Sort(sigs)
	out := slices.Clone(all)
	for i, e := range out {
		if e.Op != "acq" || !e.Wake {
			continue
		}
		from := e.Ret
		if j, _ := slices.BinarySearch(sigs, e.Ret+1); j > 0 && sigs[j-1] >= e.Call {
			from = sigs[j-1]
		}
		out[i].Call = from
	}
	return out
}

// deployStalls measures each deploy's stall. A hold lasts from its
// acquisition's reply (Observer.AcquireDone.HeldSince, cev.Got; for a
// MultiLock, each member's; without one, its acquire's return) to its release's return (for a hold Close released, to
// Close's return); a waiter (an acquisition, successful or ended by its
// context; for a Once or Group, a Do call on the name) waits from its call
// to its return (or its context's end). For every waiter not of the closed
// Client (its process's next Client's are others), each stretch of its
// wait in which no hold was on any of its names and which began within
// the deploy's window [Close called, Close returned + deployWindow] is
// the time it waited beyond the lock's being free; for a Once or Group,
// only a stretch after a run that did not succeed (a Close cut it, or f
// failed) counts: after a success, callers return the result. kind's
// names: a MultiLock's K is a mask of names, others' one name. A Cond's
// lock is its Mutex: its waiters are the acquisitions of the lock and
// the waits woken by a signal, each from its latest possible signal
// (condLockWaits); a Wait's release of the lock ends its hold when the
// release returned (noted through Observer.Released). A WaitGroup's
// "lock free" is its counter's being zero where that is known (wgZeros):
// its waiters are its Waits, and a stretch in which the counter was zero
// begins at the return of the Done that made it so; where an Add's
// outcome is unknown (a Close or a Redis error in it, a process killed in
// it) the counter is unknown until a wipe, and no stretch is counted
// (deployStall.unknown says for how many names at the deploy).
func deployStalls(kind string, all []cev, waits []wend, deploys []deployNote, wipes ...wipe) []deployStall {
	measure := true
	if kind == "cond" {
		all = condLockWaits(all)
	}
	runs := kind == "once" || kind == "oncevalue" || kind == "group"
	names := func(k int) []int {
		if kind != "multi" {
			return []int{k}
		}
		var ns []int
		for i := range chaosMultiNames {
			if k&(1<<i) != 0 {
				ns = append(ns, i)
			}
		}
		return ns
	}
	type span struct {
		from, to  int64
		ok        bool // a run that succeeded
		who, slot int  // its holder
		cl        bool // released by a Close
	}
	holds := map[int][]span{} // per name
	type waiter struct {
		who, slot, k   int
		call, ret, end int64 // end: its context's end, 0 if none before ret
		att            int   // an acquisition's attempts (cev.Att; -1: unknown)
	}
	var ws []waiter
	byCall := slices.Clone(all)
	slices.SortStableFunc(byCall, func(a, b cev) int { return int(a.Call - b.Call) })
	open := map[int]cev{}
	for _, e := range byCall {
		switch e.Op {
		case "acq":
			open[e.Who] = e
			att := -1
			if e.AttOK {
				att = e.Att
			}
			ws = append(ws, waiter{who: e.Who, slot: e.Slot, k: e.K, call: e.Call, ret: e.Ret, att: att})
		case "rel":
			a, ok := open[e.Who]
			if !ok {
				continue
			}
			delete(open, e.Who)
			for _, n := range names(a.K) {
				// From when the acquisition held it (acquiredAt), if
				// noted; a MultiLock's members each from their own.
				from, got := a.Ret, a.Got
				if kind == "multi" {
					got = a.Gots[n]
				}
				if got >= a.Call && got < from {
					from = got
				}
				holds[n] = append(holds[n], span{from: from, to: max(e.Ret, a.Ret), ok: e.Out == "ok", who: a.Who, slot: a.Slot, cl: e.Cl})
			}
		case "obs":
			if runs {
				ws = append(ws, waiter{who: e.Who, slot: e.Slot, k: e.K, call: e.Call, ret: e.Ret, att: -1})
			}
		}
	}
	var zeros map[int][]wgZero
	var unknown map[int][][2]int64
	if kind == "wg" {
		// Its Waits are its waiters; the counter's being other than zero
		// (or unknown) is its "hold".
		zeros, unknown = wgZeros(all, wipes)
		for _, e := range byCall {
			if e.Op == "wait" {
				ws = append(ws, waiter{who: e.Who, slot: e.Slot, k: e.K, call: e.Call, ret: e.Ret, att: -1})
			}
		}
		ks := map[int]bool{}
		for _, e := range all {
			if e.Op == "wait" || e.Op == "addc" {
				ks[e.K] = true
			}
		}
		for k := range ks {
			at, by := int64(0), span{}
			for _, z := range zeros[k] {
				holds[k] = append(holds[k], span{from: at, to: z.from, who: by.who, slot: by.slot})
				at, by = z.to, span{who: z.who, slot: z.slot}
			}
			holds[k] = append(holds[k], span{from: at, to: math.MaxInt64})
		}
	}
	for _, w := range waits {
		if kind != "wg" && w.K >= 0 {
			ws = append(ws, waiter{who: w.Who, slot: w.Slot, k: w.K, call: w.Call, ret: w.Ret, end: w.End, att: -1})
		}
	}
	for n := range holds {
		slices.SortFunc(holds[n], func(a, b span) int { return int(a.from - b.from) })
	}
	var out []deployStall
	for _, d := range deploys {
		ds := deployStall{note: d, measured: measure, wg: kind == "wg"}
		for _, us := range unknown {
			for _, u := range us {
				if u[0] <= d.Start && d.Start < u[1] {
					ds.unknown++
					break
				}
			}
		}
		for _, e := range all {
			if e.Op == "rel" && e.Cl && e.Slot == d.Slot && e.Ret >= d.End && e.Ret <= d.End+int64(time.Second) {
				ds.cut++
			}
		}
		lo, hi := d.Start, d.End+int64(deployWindow)
		for _, w := range ws {
			if !measure || !d.Quiet {
				break
			}
			if w.slot == d.Slot && w.call < d.End {
				continue // a waiter of the closed Client
			}
			wEnd := w.ret
			if w.end != 0 {
				wEnd = min(wEnd, w.end)
			}
			if wEnd < lo || w.call > hi {
				continue
			}
			// The holds on w's names that overlap its wait, merged.
			var hs []span
			for _, n := range names(w.k) {
				for _, h := range holds[n] {
					if h.to > w.call && h.from < wEnd {
						hs = append(hs, h)
					}
				}
			}
			slices.SortFunc(hs, func(a, b span) int { return int(a.from - b.from) })
			// Walk the free stretches of [w.call, wEnd]. For runs, the
			// first counts if the name's last run before the call failed
			// (or there was none).
			at := w.call // free from here, unless a hold covers it
			freed := "its call"
			counts := !runs
			if runs {
				var last *span
				for _, n := range names(w.k) {
					for i, h := range holds[n] {
						if h.to <= w.call && (last == nil || h.to > last.to) {
							last = &holds[n][i]
						}
					}
				}
				counts = last == nil || !last.ok
			}
			for i := 0; ; i++ {
				next := wEnd
				if i < len(hs) {
					next = min(hs[i].from, wEnd)
				}
				if next > at && at >= lo && at <= hi && counts {
					ds.gaps++
					if next-at > int64(deployBound) {
						ds.over = append(ds.over, overStretch{slot: w.slot, from: at, to: next,
							waiter: fmt.Sprintf("worker %d (slot %d) on %d, waiting %d..%d (context end %d), free from %d to %d (%v to %v after Close was called; free since %s)%s",
								w.who, w.slot, w.k, w.call, w.ret, w.end, at, next, ms(at-d.Start), ms(next-d.Start), freed, attemptsText(w.att))})
					}
					if next-at > ds.stall {
						ds.stall = next - at
						ds.waiter = fmt.Sprintf("worker %d (slot %d) on %d, waiting %d..%d (context end %d), free from %d to %d (%v to %v after Close was called; free since %s)%s",
							w.who, w.slot, w.k, w.call, w.ret, w.end, at, next, ms(at-d.Start), ms(next-d.Start), freed, attemptsText(w.att))
					}
				}
				if i >= len(hs) || hs[i].from >= wEnd {
					break
				}
				if hs[i].to > at {
					at = hs[i].to
					counts = !runs || !hs[i].ok
					freed = fmt.Sprintf("the release of worker %d (slot %d, by Close %v)", hs[i].who, hs[i].slot, hs[i].cl)
					if kind == "wg" {
						freed = fmt.Sprintf("the Done of worker %d (slot %d) that made the counter zero", hs[i].who, hs[i].slot)
					}
				}
			}
		}
		out = append(out, ds)
	}
	return out
}

// deployFigures sum up a run's deploys.
type deployFigs struct {
	n, quiet, gaps, over, left int
	cut, cutBy                 int // holds (runs) Closes ended, and the deploys that ended some
	inside                     int // deploys that struck a worker inside its critical section
	worst                      deployStall
	maxClose                   int64 // ns: the longest Close
	measured                   bool  // the kind has a stall measure
	wg                         bool  // a WaitGroup's (deployStall.wg)
	unknown                    int   // counters unknown at the deploys (deployStall.unknown)
	// Starvation (excuseStalls): the stretches over deployBound, how many
	// of them the probes' lag excused, the most lag that excused one,
	// the worst stretch not excused; the failed openings of a next
	// Client, and how many were excused.
	overs, excused         int
	excusedLag, unexcused  int64
	openFails, openExcused int
}

func deployFigures(ds []deployStall) deployFigs {
	var f deployFigs
	f.measured = len(ds) > 0
	for _, d := range ds {
		f.n++
		f.measured = f.measured && d.measured
		f.wg = d.wg
		f.unknown += d.unknown
		if d.note.Quiet {
			f.quiet++
		}
		f.gaps += d.gaps
		if d.stall > int64(deployBound) {
			f.over++
		}
		if d.stall >= f.worst.stall {
			f.worst = d
		}
		for _, o := range d.over {
			f.overs++
			if o.excused {
				f.excused++
				f.excusedLag = max(f.excusedLag, o.lag)
			} else {
				f.unexcused = max(f.unexcused, o.to-o.from)
			}
		}
		for _, o := range d.note.OpenFails {
			f.openFails++
			if o.excused {
				f.openExcused++
			}
		}
		f.left += len(d.note.Left)
		f.cut += d.cut
		if d.note.Inside {
			f.inside++
		}
		if d.cut > 0 {
			f.cutBy++
		}
		f.maxClose = max(f.maxClose, d.note.End-d.note.Start)
	}
	return f
}

func (f deployFigs) String() string {
	stall := fmt.Sprintf("waiters of other Clients waited ≤%v beyond the lock's being free, %d free stretches, %d over %v", ms(f.worst.stall), f.gaps, f.over, deployBound)
	if f.wg {
		stall = fmt.Sprintf("waiters of other Clients returned ≤%v after the Done that made the counter zero, %d zero stretches, %d over %v; at the deploys, %d counters unknown (an Add's outcome unknown: not measured)", ms(f.worst.stall), f.gaps, f.over, deployBound, f.unknown)
	}
	if f.overs > 0 {
		stall += fmt.Sprintf(" (%d stretches over it: %d excused by starvation, the probes late ≥ the excess, by ≤%v; the worst not excused %v)", f.overs, f.excused, ms(f.excusedLag), ms(f.unexcused))
	}
	if !f.measured {
		stall = "stall n/a (no deploy measured)"
	}
	open := ""
	if f.openFails > 0 {
		open = fmt.Sprintf("; next Client's openings failed and tried again: %d (%d excused by starvation)", f.openFails, f.openExcused)
	}
	return fmt.Sprintf("%d deploys (%d of holders, %d inside a critical section, %d holds ended by Close ≤%v; in the %d quiet ones %s; left in Redis after Close: %d%s)",
		f.n, f.cutBy, f.inside, f.cut, ms(f.maxClose), f.quiet, stall, f.left, open)
}

// errorer is what checkDeploys reports to: a *testing.T, or a recorder in
// the tests of the check itself.
type errorer interface {
	Helper()
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

// attemptsText says how many acquisition scripts a waiter that got the
// lock sent ("" when unknown, n < 0): one means its wait was that
// script's round trip and the client's work around it, none that the
// lock was handed on inside its Client.
func attemptsText(n int) string {
	if n < 0 {
		return ""
	}
	return fmt.Sprintf("; its acquisition sent %d acquisition scripts", n)
}

// checkDeploys asserts what each deploy must leave: its Close returned
// nil, its next Client opened (a failed attempt only if it was the
// harness's own connection and the probes' lag excused it), nothing of
// the closed Client in Redis, no waiter of another Client waiting more
// than deployBound beyond the lock's being free but in a stretch the
// probes' lag excused (excuseStalls; without it, none is).
func checkDeploys(t errorer, ds []deployStall) {
	t.Helper()
	for _, d := range ds {
		n := d.note
		if n.Err != "" || n.Ident == "" {
			t.Errorf("deploy of slot %d (%s, %q): Close or the next Client failed: %s", n.Slot, n.Name, n.Ident, n.Err)
		}
		for _, f := range n.OpenFails {
			if !f.excused {
				t.Errorf("deploy of slot %d (%s): opening the next Client failed (%d..%d, %v; the harness's connection: %v; the probes late %v in it): %s", n.Slot, n.Name, f.From, f.To, ms(f.To-f.From), f.Dial, ms(f.lag), f.Err)
			} else {
				t.Logf("deploy of slot %d (%s): opening the next Client failed, tried again (%d..%d, %v; the harness's connection), excused by starvation: the probes late %v in it: %s", n.Slot, n.Name, f.From, f.To, ms(f.To-f.From), ms(f.lag), f.Err)
			}
		}
		if len(n.Left) > 0 {
			t.Errorf("deploy of slot %d: Client %s (%s) left in Redis after its Close returned (%v after it began): %v", n.Slot, n.Name, n.Ident, ms(n.End-n.Start), n.Left)
		}
		for _, o := range d.over {
			if n.Before != "" {
				o.waiter += "; the fault before the deploy: " + n.Before
			}
			if !o.excused {
				t.Errorf("deploy of slot %d (Close %d..%d, %v): a waiter of another Client waited %v beyond the lock's being free (bound %v; the probes late %v in it, less than the excess): %s", n.Slot, n.Start, n.End, ms(n.End-n.Start), ms(o.to-o.from), deployBound, ms(o.lag), o.waiter)
			} else {
				t.Logf("deploy of slot %d (Close %d..%d, %v): a waiter of another Client waited %v beyond the lock's being free, excused by starvation: the probes late %v in it (excess %v): %s", n.Slot, n.Start, n.End, ms(n.End-n.Start), ms(o.to-o.from), ms(o.lag), ms(o.to-o.from-int64(deployBound)), o.waiter)
			}
		}
	}
}
