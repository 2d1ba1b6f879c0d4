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
// names may hold spaces, braces or binary.
func quote(name string) string {
	if utf8.ValidString(name) && !strings.ContainsAny(name, " \t\n\r\"\\") && strconv.IsPrint(firstRune(name)) {
		plain := true
		for _, r := range name {
			if !strconv.IsPrint(r) {
				plain = false
				break
			}
		}
		if plain {
			return name
		}
	}
	return strconv.Quote(name)
}

func firstRune(s string) rune {
	r, _ := utf8.DecodeRuneInString(s)
	return r
}

func lease(d time.Duration) string {
	if d < 0 {
		return "no expiry"
	}
	return d.Round(time.Millisecond).String()
}

func format(states []dsync.LockState) string {
	var b strings.Builder
	for _, s := range states {
		fmt.Fprintf(&b, "%s %s\n", s.Kind, quote(s.Name))
		if len(s.Holders) == 0 {
			fmt.Fprintf(&b, "  free (last fencing token %d)\n", s.LastToken)
		}
		for _, h := range s.Holders {
			fmt.Fprintf(&b, "  holder  %s  count %d  token %d  lease %s\n", h.Owner, h.Count, h.Token, lease(h.Lease))
		}
		if len(s.Waiters) > 0 {
			fmt.Fprintf(&b, "  waiters %d, in order:\n", len(s.Waiters))
		}
		for i, w := range s.Waiters {
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
}

type jsonWaiter struct {
	Owner   string `json:"owner"`
	PlaceMS int64  `json:"place_ms"`
}

type jsonState struct {
	Kind      string       `json:"kind"`
	Name      string       `json:"name"`
	Held      bool         `json:"held"`
	Holders   []jsonHolder `json:"holders"`
	LastToken uint64       `json:"last_token"`
	Waiters   []jsonWaiter `json:"waiters"`
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
			j.Holders = append(j.Holders, jsonHolder{h.Owner, h.Count, h.Token, ms(h.Lease)})
		}
		for _, w := range s.Waiters {
			j.Waiters = append(j.Waiters, jsonWaiter{w.Owner, ms(w.Place)})
		}
		out = append(out, j)
	}
	return out
}
