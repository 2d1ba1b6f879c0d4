package faults

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// chaosStore is what the critical sections of the chaos scenario write to,
// one pair of resources per name index: a fenced counter, which rejects a
// read or a write with a token below the largest it has accepted, and an
// unfenced register, which accepts everything but counts the writers and
// readers inside it. Child processes reach it over HTTP.
type chaosStore struct {
	mu   sync.Mutex
	in   map[int]map[string]int64 // what each process has inside: w<k>, r<k>, s (permits)
	dead map[int]bool             // killed processes: their late register and gauge requests are ignored
	f    map[int]*fencedCounter
	r    map[int]*register
	sem  int64 // semaphore permits inside
	semM int64 // most permits inside at once
	semO int64 // entries that took the gauge above the size
	size int64
	trap *stopTrap // armed: the next fenced read stops its process (armStop)
	// sprung: the trap whose writer is frozen or thawed and has not yet
	// written (its write closes its wrote)
	sprung *stopTrap
}

// A stopTrap catches a holder inside its critical section: the next
// writer's fenced read ("fr") to arrive, from a live process, hands that
// process's slot to the monkey and is answered only once the monkey has
// frozen the process (closed frozen). The holder has checked its lock
// context and had its read accepted; thawed after its lease has lapsed, it
// writes with its token, which the fence must reject once another holder
// has been in.
type stopTrap struct {
	slot   chan int // buffered 1
	frozen chan struct{}
	name   func(k int) bool // the names whose reads spring it (nil: all)
	k      int              // set by the read that sprang it (before slot): its name
	tok    uint64           // and its token
	from   int              // and its process's slot
	// wrote is closed when the frozen writer's fenced write (its name,
	// its token, its process) reaches the store, accepted or rejected.
	wrote chan struct{}
}

// armStop sets a trap for a read of a name that name accepts (nil: any);
// disarm takes it back if no request has sprung it (false: one has, its
// slot is on the way).
func (s *chaosStore) armStop(name func(k int) bool) *stopTrap {
	tr := &stopTrap{slot: make(chan int, 1), frozen: make(chan struct{}), wrote: make(chan struct{}), name: name}
	s.mu.Lock()
	s.trap = tr
	s.mu.Unlock()
	return tr
}

// raised says whether a read or write of name k with a token above tok
// has raised its fence.
func (s *chaosStore) raised(k int, tok uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fc(k).max > tok
}

func (s *chaosStore) disarm(tr *stopTrap) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.trap != tr {
		return false
	}
	s.trap = nil
	return true
}

// spring: a fenced read of name k by a live process springs an armed
// trap and waits until the process is frozen.
func (s *chaosStore) spring(slot int, op string, k int, tok uint64) {
	if op != "fr" {
		return
	}
	s.mu.Lock()
	tr := s.trap
	if tr == nil || s.dead[slot] || tr.name != nil && !tr.name(k) {
		s.mu.Unlock()
		return
	}
	s.trap = nil
	tr.k, tr.tok, tr.from = k, tok, slot
	s.sprung = tr
	s.mu.Unlock()
	tr.slot <- slot
	<-tr.frozen
}

type fencedCounter struct {
	max      uint64 // largest token accepted
	val      int64
	accepted int64 // writes accepted
	rejected int64 // reads and writes rejected for a stale token
	stale    int64 // reader checks that found a newer writer
}

type register struct {
	val, puts int64
	w, r      int64 // writers and readers inside
	overlaps  int64 // entries while an excluded holder was inside
	torn      int64 // reads that saw the value change under them
}

func newChaosStore(size int64) *chaosStore {
	return &chaosStore{f: map[int]*fencedCounter{}, r: map[int]*register{}, size: size, in: map[int]map[string]int64{}, dead: map[int]bool{}}
}

func (s *chaosStore) fc(k int) *fencedCounter {
	if s.f[k] == nil {
		s.f[k] = &fencedCounter{}
	}
	return s.f[k]
}

func (s *chaosStore) reg(k int) *register {
	if s.r[k] == nil {
		s.r[k] = &register{}
	}
	return s.r[k]
}

// inside records that process slot entered (d > 0) or left (d < 0)
// with what: w<k>, r<k>, or s (d permits).
func (s *chaosStore) inside(slot int, what string, d int64) {
	if s.in[slot] == nil {
		s.in[slot] = map[string]int64{}
	}
	s.in[slot][what] += d
}

// clear drops the resources and the gauge once their figures are taken
// (the soak measures its heap without them).
func (s *chaosStore) clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.f, s.r, s.in, s.dead = map[int]*fencedCounter{}, map[int]*register{}, map[int]map[string]int64{}, map[int]bool{}
}

// forget takes a killed process out of the registers and the gauge: it
// will never leave them.
func (s *chaosStore) forget(slot int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for what, n := range s.in[slot] {
		var k int
		switch {
		case what == "s":
			s.sem -= n
		case what[0] == 'w':
			fmt.Sscan(what[1:], &k)
			s.reg(k).w -= n
		case what[0] == 'r':
			fmt.Sscan(what[1:], &k)
			s.reg(k).r -= n
		}
	}
	delete(s.in, slot)
	s.dead[slot] = true
}

// op runs one operation of process slot and returns its reply: "stale",
// or a value.
func (s *chaosStore) op(slot int, op string, k int, tok uint64, v int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead[slot] && op != "fr" && op != "fw" && op != "fc" {
		// A request the process sent before it was killed, arriving
		// after forget: the register and gauge no longer count it. (The
		// fence still sees it: a delayed write is what it is for.)
		return "0"
	}
	switch op {
	case "fr": // fenced read by a writer: raises the fence
		f := s.fc(k)
		if tok < f.max {
			f.rejected++
			return "stale"
		}
		f.max = tok
		return strconv.FormatInt(f.val, 10)
	case "fw": // fenced write
		if tr := s.sprung; tr != nil && tr.from == slot && tr.k == k && tr.tok == tok {
			s.sprung = nil
			close(tr.wrote)
		}
		f := s.fc(k)
		if tok < f.max {
			f.rejected++
			return "stale"
		}
		f.max, f.val = tok, v
		f.accepted++
		return "ok"
	case "fc": // a reader's check: no writer with a larger token has been in
		f := s.fc(k)
		if tok < f.max {
			f.stale++
			return "stale"
		}
		return "ok"
	case "win": // a writer enters the unfenced register
		r := s.reg(k)
		if r.w > 0 || r.r > 0 {
			r.overlaps++
		}
		r.w++
		s.inside(slot, "w"+strconv.Itoa(k), 1)
		return strconv.FormatInt(r.val, 10)
	case "wout":
		r := s.reg(k)
		r.val = v
		r.puts++
		r.w--
		s.inside(slot, "w"+strconv.Itoa(k), -1)
		return "ok"
	case "rin":
		r := s.reg(k)
		if r.w > 0 {
			r.overlaps++
		}
		r.r++
		s.inside(slot, "r"+strconv.Itoa(k), 1)
		return strconv.FormatInt(r.val, 10)
	case "rout": // v: the value read on entry
		r := s.reg(k)
		if r.val != v {
			r.torn++
		}
		r.r--
		s.inside(slot, "r"+strconv.Itoa(k), -1)
		return "ok"
	case "sin":
		s.sem += v
		s.semM = max(s.semM, s.sem)
		if s.sem > s.size {
			s.semO++
		}
		s.inside(slot, "s", v)
		return "ok"
	case "sout":
		s.sem -= v
		s.inside(slot, "s", -v)
		return "ok"
	}
	return "bad op"
}

func (s *chaosStore) serve(t testing.TB) string {
	mux := http.NewServeMux()
	mux.HandleFunc("/c", func(w http.ResponseWriter, r *http.Request) {
		k, _ := strconv.Atoi(r.FormValue("k"))
		tok, _ := strconv.ParseUint(r.FormValue("tok"), 10, 64)
		v, _ := strconv.ParseInt(r.FormValue("v"), 10, 64)
		slot, _ := strconv.Atoi(r.FormValue("s"))
		s.spring(slot, r.FormValue("op"), k, tok)
		fmt.Fprint(w, s.op(slot, r.FormValue("op"), k, tok, v))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// storeFigures sums the resources of every name.
type storeFigures struct {
	fencedAccepted, fencedRejected, fencedLost, staleReads int64
	puts, lostUpdates, overlaps, torn                      int64
	semMost, semOver                                       int64
}

func (s *chaosStore) figures() (f storeFigures) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.f {
		f.fencedAccepted += c.accepted
		f.fencedRejected += c.rejected
		f.fencedLost += c.accepted - c.val
		f.staleReads += c.stale
	}
	for _, r := range s.r {
		f.puts += r.puts
		f.lostUpdates += r.puts - r.val
		f.overlaps += r.overlaps
		f.torn += r.torn
	}
	f.semMost, f.semOver = s.semM, s.semO
	return f
}

// chaosRes is a chaosStore reached over HTTP from child process slot.
type chaosRes struct {
	r    remote
	slot int
}

func (c chaosRes) do(op string, k int, tok uint64, v int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "/c?op=%s&k=%d&tok=%d&v=%d&s=%d", op, k, tok, v, c.slot)
	return c.r.call(b.String())
}

func (c chaosRes) num(op string, k int, tok uint64, v int64) (int64, bool) {
	s := c.do(op, k, tok, v)
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
