package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
)

// errUsage marks errors that exit with status 2.
var errUsage = errors.New("usage")

type options struct {
	addr, user, password, prefix string
	tls, json, force, yes        bool
	interval, timeout            time.Duration
}

// run is the whole command, apart from signals and the process exit, so
// tests run it in-process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	err := runErr(ctx, args, getenv, stdout)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "dsync:", strings.TrimPrefix(err.Error(), "usage: "))
		fmt.Fprintln(stderr, "usage: dsync [--addr A] [--tls] [--user U] [--password P] [--prefix P] [--json] inspect NAME | list [PATTERN] | watch NAME | unlock --force --yes NAME")
		return 2
	default:
		fmt.Fprintln(stderr, "dsync:", strings.TrimPrefix(err.Error(), "dsync: "))
		return 1
	}
}

func parse(args []string, getenv func(string) string) (options, []string, error) {
	o := options{addr: getenv("REDIS_ADDR"), user: getenv("REDIS_USER"), password: getenv("REDIS_PASSWORD")}
	if o.addr == "" {
		o.addr = "127.0.0.1:6379"
	}
	fs := flag.NewFlagSet("dsync", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.addr, "addr", o.addr, "")
	fs.StringVar(&o.user, "user", o.user, "")
	fs.StringVar(&o.password, "password", o.password, "")
	fs.StringVar(&o.prefix, "prefix", dsync.DefaultKeyPrefix, "")
	fs.BoolVar(&o.tls, "tls", false, "")
	fs.BoolVar(&o.json, "json", false, "")
	fs.BoolVar(&o.force, "force", false, "")
	fs.BoolVar(&o.yes, "yes", false, "")
	fs.DurationVar(&o.interval, "interval", 250*time.Millisecond, "")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "")
	// Flags may come before or after the command and its arguments.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return o, nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if o.interval <= 0 || o.timeout <= 0 {
		return o, nil, fmt.Errorf("%w: --interval and --timeout must be positive", errUsage)
	}
	return o, pos, nil
}

func runErr(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	o, pos, err := parse(args, getenv)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return fmt.Errorf("%w: no command", errUsage)
	}
	cmd, pos := pos[0], pos[1:]
	want := map[string][2]int{"inspect": {1, 1}, "list": {0, 1}, "watch": {1, 1}, "unlock": {1, 1}}
	n, ok := want[cmd]
	if !ok {
		return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
	if len(pos) < n[0] || len(pos) > n[1] {
		return fmt.Errorf("%w: %s takes %s", errUsage, cmd, map[string]string{"inspect": "NAME", "list": "[PATTERN]", "watch": "NAME", "unlock": "NAME"}[cmd])
	}
	if cmd == "unlock" && (!o.force || !o.yes) {
		// Checked before connecting: a forced release can break a live
		// holder, so it is never the default and never a single flag.
		return fmt.Errorf("%w: refusing to unlock %q: it releases the lock whoever holds it, and the holder may still be working; pass --force --yes", errUsage, pos[0])
	}
	c, closeAll, err := connect(ctx, o)
	if err != nil {
		return err
	}
	defer closeAll()
	switch cmd {
	case "inspect":
		return inspect(ctx, c, o, pos[0], stdout)
	case "list":
		pattern := ""
		if len(pos) == 1 {
			pattern = pos[0]
		}
		return list(ctx, c, o, pattern, stdout)
	case "watch":
		return watch(ctx, c, o, pos[0], stdout)
	default:
		return unlock(ctx, c, o, pos[0], stdout)
	}
}

func connect(ctx context.Context, o options) (*dsync.Client, func(), error) {
	opt := rueidis.ClientOption{
		InitAddress:  []string{o.addr},
		Username:     o.user,
		Password:     o.password,
		DisableCache: true, // a tool makes a few reads; tracking buys nothing
		Dialer:       netDialer(o.timeout),
	}
	if o.tls {
		opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	rc, err := rueidis.NewClient(opt)
	if _, ok := rueidis.IsRedisErr(err); ok {
		// Reached, but refused: a wrong user or password, mostly.
		return nil, nil, fmt.Errorf("redis at %s refused the connection: %w", o.addr, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("cannot reach Redis at %s: %w", o.addr, err)
	}
	c, err := dsync.NewClient(rc, dsync.WithKeyPrefix(o.prefix))
	if err != nil {
		rc.Close()
		return nil, nil, err
	}
	return c, func() { c.Close(); rc.Close() }, nil
}

func inspect(ctx context.Context, c *dsync.Client, o options, name string, w io.Writer) error {
	states, err := inspectCtx(ctx, c, o, name)
	if err != nil {
		return err
	}
	if len(states) == 0 {
		return fmt.Errorf("no lock named %q under prefix %q", name, o.prefix)
	}
	if o.json {
		return json.NewEncoder(w).Encode(toJSON(states))
	}
	_, err = io.WriteString(w, format(states))
	return err
}

func inspectCtx(ctx context.Context, c *dsync.Client, o options, name string) ([]dsync.LockState, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	return c.Inspect(ctx, name)
}

func list(ctx context.Context, c *dsync.Client, o options, pattern string, w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	refs, err := c.List(ctx, pattern)
	if err != nil {
		return err
	}
	if o.json {
		type ref struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		}
		out := make([]ref, 0, len(refs))
		for _, r := range refs {
			out = append(out, ref{string(r.Kind), r.Name})
		}
		return json.NewEncoder(w).Encode(out)
	}
	for _, r := range refs {
		if _, err := fmt.Fprintf(w, "%-10s %s\n", r.Kind, quote(r.Name)); err != nil {
			return err
		}
	}
	return nil
}

// watch polls Inspect and prints the state each time it changes. Polling,
// rather than the wakeup channels, also sees acquisitions and queue
// changes, which publish nothing.
func watch(ctx context.Context, c *dsync.Client, o options, name string, w io.Writer) error {
	t := time.NewTicker(o.interval)
	defer t.Stop()
	last := "\x00"
	for {
		states, err := inspectCtx(ctx, c, o, name)
		if ctx.Err() != nil {
			return nil // interrupted: the normal end of a watch
		}
		if err != nil {
			return err
		}
		var cur string
		if o.json {
			b, _ := json.Marshal(toJSON(states))
			cur = string(b) + "\n"
		} else if len(states) == 0 {
			cur = "(no lock named " + quote(name) + ")\n"
		} else {
			cur = format(states)
		}
		// Remaining leases tick down on every poll; compare without them.
		if key := stable(states); key != last {
			last = key
			if !o.json {
				cur = "--- " + time.Now().Format("15:04:05.000") + "\n" + cur
			}
			if _, err := io.WriteString(w, cur); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// stable is the part of the states that a watcher wants to see change.
func stable(states []dsync.LockState) string {
	var b strings.Builder
	for _, s := range states {
		fmt.Fprintf(&b, "%s %d %s %d %v %d|", s.Kind, s.LastToken, s.Mode, s.Free, s.Done, s.Counter)
		for _, h := range s.Holders {
			fmt.Fprintf(&b, "h %s %d %d|", h.Owner, h.Count, h.Token)
		}
		for _, wt := range s.Waiters {
			fmt.Fprintf(&b, "w %s|", wt.Owner)
		}
	}
	return b.String()
}

func unlock(ctx context.Context, c *dsync.Client, o options, name string, w io.Writer) error {
	before, err := inspectCtx(ctx, c, o, name)
	if err != nil {
		return err
	}
	if len(before) == 0 {
		return fmt.Errorf("no lock named %q under prefix %q", name, o.prefix)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	refs, err := c.ForceUnlock(ctx, name)
	if err != nil {
		return err
	}
	if o.json {
		return json.NewEncoder(w).Encode(map[string]any{"released": toJSON(heldOnly(before, refs))})
	}
	if len(refs) == 0 {
		var kinds []string
		for _, s := range before {
			kinds = append(kinds, string(s.Kind))
		}
		// Only a Mutex or FairMutex can be forced; the other primitives'
		// holders are freed by their leases.
		_, err := fmt.Fprintf(w, "%s is not held as a mutex or fair_mutex (found: %s): nothing released\n", quote(name), strings.Join(kinds, ", "))
		return err
	}
	for _, s := range heldOnly(before, refs) {
		for _, h := range s.Holders {
			fmt.Fprintf(w, "released %s %s held by %s (token %d); its waiters were woken\n", s.Kind, quote(name), h.Owner, h.Token)
		}
	}
	return nil
}

func heldOnly(states []dsync.LockState, refs []dsync.LockRef) []dsync.LockState {
	var out []dsync.LockState
	for _, s := range states {
		for _, r := range refs {
			if r.Kind == s.Kind {
				out = append(out, s)
			}
		}
	}
	return out
}
