package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dsync/dsync/dsync"
)

// quote prints a name as is when that is unambiguous, else Go-quoted:
// names may hold spaces, quotes or binary.
func quote(name string) string {
	if !utf8.ValidString(name) || strings.ContainsAny(name, " \"\\") || strings.ContainsFunc(name, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return strconv.Quote(name)
	}
	return name
}

func lease(d time.Duration) string {
	if d < 0 {
		return "no expiry"
	}
	return d.Round(time.Millisecond).String()
}

// waiting counts the waiters of s: a Mutex's Waiters are Clients, each
// standing for its goroutines that wait.
func waiting(s dsync.LockState) int {
	n := 0
	for _, w := range s.Waiters {
		n += int(max(w.Count, 1))
	}
	return n
}

func format(states []dsync.LockState) string {
	var b strings.Builder
	for _, s := range states {
		fmt.Fprintf(&b, "%s %s\n", s.Kind, quote(s.Name))
		switch s.Kind {
		case dsync.KindSemaphore:
			fmt.Fprintf(&b, "  permits %d free of %d\n", s.Free, s.Size)
		case dsync.KindOnce:
			fmt.Fprintf(&b, "  done %v\n", s.Done)
		case dsync.KindWaitGroup:
			fmt.Fprintf(&b, "  counter %d\n", s.Counter)
		case dsync.KindGroup:
			fmt.Fprintf(&b, "  key %s  result kept %v\n", quote(s.Key), s.Done)
		case dsync.KindRWMutex:
			if s.Mode != "" {
				fmt.Fprintf(&b, "  mode %s\n", s.Mode)
			}
		case dsync.KindElection:
			if l := s.Leader; l.Term != 0 {
				fmt.Fprintf(&b, "  leader  %s  term %d  since %s  value %s\n", l.Owner, l.Term, l.Since.UTC().Format(time.RFC3339Nano), quote(l.Value))
			} else {
				fmt.Fprintf(&b, "  no leader\n")
			}
		}
		switch {
		case len(s.Holders) > 0 || s.Kind == dsync.KindWaitGroup || s.Kind == dsync.KindCond:
		case s.Kind == dsync.KindGroup:
			fmt.Fprintf(&b, "  no run in progress (last fencing token %d)\n", s.LastToken)
		default:
			fmt.Fprintf(&b, "  free (last fencing token %d)\n", s.LastToken)
		}
		for _, h := range s.Holders {
			if s.Kind == dsync.KindSemaphore {
				fmt.Fprintf(&b, "  holder  %s  permits %d  lease %s\n", h.Owner, h.Permits, lease(h.Lease))
				continue
			}
			fmt.Fprintf(&b, "  holder  %s  count %d  token %d  lease %s\n", h.Owner, h.Count, h.Token, lease(h.Lease))
		}
		if s.Kind == dsync.KindMutex && len(s.Waiters) > 0 {
			fmt.Fprintf(&b, "  waiters %d, in %d clients:\n", waiting(s), len(s.Waiters))
			for _, w := range s.Waiters {
				fmt.Fprintf(&b, "    %s  goroutines %d  entry expires in %s unless refreshed\n", w.Owner, w.Count, lease(w.Place))
			}
			continue
		}
		if s.Kind == dsync.KindGroup && len(s.Waiters) > 0 {
			fmt.Fprintf(&b, "  waiting in %d processes:\n", len(s.Waiters))
			for _, w := range s.Waiters {
				fmt.Fprintf(&b, "    %s  entry expires in %s unless refreshed\n", w.Owner, lease(w.Place))
			}
			continue
		}
		if len(s.Waiters) > 0 {
			fmt.Fprintf(&b, "  waiters %d, in order:\n", len(s.Waiters))
		}
		for i, w := range s.Waiters {
			if s.Kind == dsync.KindSemaphore {
				fmt.Fprintf(&b, "    %d. %s  wants %d  place %s\n", i+1, w.Owner, w.Permits, lease(w.Place))
				continue
			}
			fmt.Fprintf(&b, "    %d. %s  place %s\n", i+1, w.Owner, lease(w.Place))
		}
	}
	return b.String()
}

type jsonHolder struct {
	Owner   string `json:"owner"`
	Count   int64  `json:"count"`
	Token   uint64 `json:"token"`
	LeaseMS int64  `json:"lease_ms"` // -1: no expiry
	Permits int64  `json:"permits"`
}

type jsonWaiter struct {
	Owner   string `json:"owner"`
	PlaceMS int64  `json:"place_ms"`
	Permits int64  `json:"permits"`
	Count   int64  `json:"count"` // goroutines of a waiting Client (Mutex); 1 otherwise
}

type jsonState struct {
	Kind      string       `json:"kind"`
	Name      string       `json:"name"`
	Key       string       `json:"key,omitempty"` // Group
	Held      bool         `json:"held"`
	Holders   []jsonHolder `json:"holders"`
	LastToken uint64       `json:"last_token"`
	Waiters   []jsonWaiter `json:"waiters"`
	Mode      string       `json:"mode,omitempty"`    // RWMutex
	Size      *int64       `json:"size,omitempty"`    // Semaphore
	Free      *int64       `json:"free,omitempty"`    // Semaphore
	Done      *bool        `json:"done,omitempty"`    // Once, Group (a result is kept)
	Counter   *int64       `json:"counter,omitempty"` // WaitGroup
	Leader    *jsonLeader  `json:"leader,omitempty"`  // Election, when it has one
}

type jsonLeader struct {
	Owner string    `json:"owner"`
	Term  uint64    `json:"term"`
	Since time.Time `json:"since"`
	Value string    `json:"value"`
}

func ms(d time.Duration) int64 {
	if d < 0 {
		return -1
	}
	return d.Milliseconds()
}

func toJSON(states []dsync.LockState) []jsonState {
	out := make([]jsonState, 0, len(states))
	for _, s := range states {
		j := jsonState{Kind: string(s.Kind), Name: s.Name, Held: len(s.Holders) > 0, LastToken: s.LastToken,
			Holders: []jsonHolder{}, Waiters: []jsonWaiter{}}
		for _, h := range s.Holders {
			j.Holders = append(j.Holders, jsonHolder{h.Owner, h.Count, h.Token, ms(h.Lease), h.Permits})
		}
		for _, w := range s.Waiters {
			j.Waiters = append(j.Waiters, jsonWaiter{w.Owner, ms(w.Place), w.Permits, w.Count})
		}
		j.Mode = s.Mode
		switch s.Kind {
		case dsync.KindSemaphore:
			j.Size, j.Free = &s.Size, &s.Free
		case dsync.KindOnce:
			j.Done = &s.Done
		case dsync.KindGroup:
			j.Key, j.Done = s.Key, &s.Done
		case dsync.KindWaitGroup:
			j.Counter = &s.Counter
		case dsync.KindElection:
			if l := s.Leader; l.Term != 0 {
				j.Leader = &jsonLeader{l.Owner, l.Term, l.Since.UTC(), l.Value}
			}
		}
		out = append(out, j)
	}
	return out
}
