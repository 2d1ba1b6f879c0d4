package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dsync/dsync/dsync"
	"github.com/redis/rueidis"
)

// errUsage marks errors that exit with status 2.
var errUsage = errors.New("usage")

// errHelp asks for help (--help, -h, help [COMMAND]): printed on stdout,
// status 0. errNothing marks a command that found nothing to do: status 3.
var (
	errHelp    = errors.New("help")
	errNothing = errors.New("nothing done")
)

// usage is the help of the whole command; commandHelp that of each
// command.
const usage = `dsync looks at and repairs dsync locks in Redis.

Usage:
  dsync [flags] COMMAND [ARGS]
  dsync help [COMMAND]

Commands:
  inspect NAME              holders, fencing tokens, leases and waiters of every lock called NAME
  list [PATTERN]            lock names matching a glob (SCAN, never KEYS)
  watch NAME                print the state of NAME each time it changes, until interrupted
  top [PATTERN]             the most contended locks (waiters, wait time, holders), redrawn every --interval
  unlock --force --yes NAME release every hold of NAME (any primitive) and wake its waiters

Flags (before or after the command):
  --addr ADDR          Redis address (env REDIS_ADDR; default 127.0.0.1:6379)
  --user USER          ACL user (env REDIS_USER)
  --password PASS      password (env REDIS_PASSWORD; prefer the variable)
  --tls                connect with TLS
  --tls-ca FILE        PEM file of the CAs that may sign the server's certificate (implies --tls)
  --tls-server-name N  name to check the server's certificate against (implies --tls)
  --prefix PREFIX      dsync key prefix (default "dsync")
  --json               machine-readable output
  --interval D         poll interval of watch (default 250ms; with keyspace notifications a fallback)
  --timeout D          bound on connecting and on each command (default 5s)
  --limit N            rows shown by top (default 20)
  --all                top: list idle locks too (no holder, no waiter)
  -h, --help           this help; after a command, the command's help

Exit status: 0 done, 1 error (Redis unreachable, refused, no such lock),
2 bad usage, 3 nothing to do (unlock found nothing held).
`

var commandHelp = map[string]string{
	"inspect": `dsync inspect NAME

Prints, for every primitive called NAME under the prefix (Mutex, FairMutex,
RWMutex, Semaphore, Once, WaitGroup), its holders (owner, count, fencing
token, remaining lease), the last fencing token, and its waiters in queue
order. Exit status 1 if there is no lock called NAME.
`,
	"list": `dsync list [PATTERN]

Prints the locks whose name matches PATTERN (Redis glob syntax: *, ?, [...],
\ to escape; default *), one per line with its kind. It walks the keyspace
with SCAN, so it does not block Redis, and may miss locks created or
removed while it runs.
`,
	"watch": `dsync watch NAME

Prints the state of NAME (as inspect does) and again each time it changes,
until interrupted (Ctrl-C). When the server sends keyspace notifications
(notify-keyspace-events with K and an event class, e.g. "KA"), a change
wakes it at once; it also looks every --interval, for what sends none.
`,
	"top": `dsync top [PATTERN]

Lists the locks matching PATTERN (default all) that have holders or
waiters, the most waiters first, then the longest waited for, then the most
holders: kind, holders, waiters, how long the oldest holder has held (from
its fencing token, which is the server clock in µs when it was minted), how
long the lock has had waiters without a break (WAITING, as top's refreshes
saw it: from the first refresh that found waiters), and the name. Idle
locks (no holder, no waiter) are hidden unless --all. Redrawn every
--interval (use a larger one on a big keyspace: each refresh SCANs the
prefix), until interrupted: in place (ANSI clear and home) when stdout is a
terminal, one frame after the other otherwise; with --json, one JSON array
per refresh. Shows at most --limit rows.

A Mutex's waiters are counted per waiting Client, the holder's own
included (its goroutines queued behind it), as the Client last wrote them
(10 ms after its queue changed, at least every lease/3). A
Mutex's HELD FOR is the age of its hold in Redis: handoffs inside the
holder's Client keep that hold, so it can span several local holders.
`,
	"unlock": `dsync unlock --force --yes NAME

Releases every primitive called NAME whoever holds it, and wakes its
waiters: Mutex and FairMutex holders, every RWMutex hold (write and read),
every Semaphore permit, a running Once (its result is not recorded; a
waiter runs it next); a WaitGroup's counter is reset to zero, so its Waits
return. A holder may still be working: its Client is told at once and
cancels its lock context within milliseconds, and each released hold's
line says whether its holder was told (and by which Client); a holder
that took the lock with Lock has no lock context, so its Client only logs
the loss; a holder that could not be told (its process gone, stopped or
cut off from Redis) finds out at its next renewal. Both flags are required. Exit status 3 if
nothing was held.
`,
}

type options struct {
	addr, user, password, prefix string
	tlsCA, tlsServerName         string
	tls, json, force, yes, all   bool
	interval, timeout            time.Duration
	limit                        int
}

// run is the whole command, apart from signals and the process exit, so
// tests run it in-process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	err := runErr(ctx, args, getenv, stdout)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errHelp):
		cmd := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "help"), ": ")
		if h, ok := commandHelp[cmd]; ok {
			fmt.Fprint(stdout, h)
		} else {
			fmt.Fprint(stdout, usage)
		}
		return 0
	case errors.Is(err, errNothing):
		fmt.Fprintln(stderr, "dsync:", err)
		return 3
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "dsync:", strings.TrimPrefix(err.Error(), "usage: "))
		fmt.Fprintln(stderr, "usage: dsync [flags] inspect NAME | list [PATTERN] | watch NAME | top [PATTERN] | unlock --force --yes NAME (dsync --help for more)")
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
	fs.StringVar(&o.tlsCA, "tls-ca", "", "")
	fs.StringVar(&o.tlsServerName, "tls-server-name", "", "")
	fs.BoolVar(&o.json, "json", false, "")
	fs.BoolVar(&o.force, "force", false, "")
	fs.BoolVar(&o.yes, "yes", false, "")
	fs.DurationVar(&o.interval, "interval", 250*time.Millisecond, "")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "")
	fs.IntVar(&o.limit, "limit", 20, "")
	fs.BoolVar(&o.all, "all", false, "")
	// Flags may come before or after the command and its arguments.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				if len(pos) > 0 {
					return o, nil, fmt.Errorf("%w: %s", errHelp, pos[0])
				}
				return o, nil, errHelp
			}
			return o, nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if o.tlsCA != "" || o.tlsServerName != "" {
		o.tls = true
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
	if cmd == "help" {
		if len(pos) > 0 {
			return fmt.Errorf("%w: %s", errHelp, pos[0])
		}
		return errHelp
	}
	want := map[string][2]int{"inspect": {1, 1}, "list": {0, 1}, "watch": {1, 1}, "unlock": {1, 1}, "top": {0, 1}}
	n, ok := want[cmd]
	if !ok {
		return fmt.Errorf("%w: unknown command %q", errUsage, cmd)
	}
	if len(pos) < n[0] || len(pos) > n[1] {
		return fmt.Errorf("%w: %s takes %s", errUsage, cmd, map[string]string{"inspect": "NAME", "list": "[PATTERN]", "watch": "NAME", "unlock": "NAME", "top": "[PATTERN]"}[cmd])
	}
	if cmd == "unlock" && (!o.force || !o.yes) {
		// Checked before connecting: a forced release can break a live
		// holder, so it is never the default and never a single flag.
		return fmt.Errorf("%w: refusing to unlock %q: it releases the lock whoever holds it, and the holder may still be working; pass --force --yes", errUsage, pos[0])
	}
	if err := checkAddr(o.addr); err != nil {
		return fmt.Errorf("%w: --addr (or REDIS_ADDR): %v", errUsage, err)
	}
	c, rc, closeAll, err := connect(ctx, o)
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
		return watch(ctx, c, rc, o, pos[0], stdout)
	case "top":
		pattern := ""
		if len(pos) == 1 {
			pattern = pos[0]
		}
		return top(ctx, c, rc, o, pattern, stdout)
	default:
		return unlock(ctx, c, o, pos[0], stdout)
	}
}

// checkAddr checks --addr before connecting: host:port with a port in
// 1..65535. A URL or credentials are refused without being echoed, since
// they may hold a password.
func checkAddr(addr string) error {
	if strings.Contains(addr, "@") || strings.Contains(addr, "://") {
		return errors.New("takes host:port, not a URL or credentials (not shown here): give the user with --user and the password in REDIS_PASSWORD")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("%q: bad port %q: want 1 to 65535", addr, port)
	}
	return nil
}

func connect(ctx context.Context, o options) (*dsync.Client, rueidis.Client, func(), error) {
	opt := rueidis.ClientOption{
		InitAddress:  []string{o.addr},
		Username:     o.user,
		Password:     o.password,
		DisableCache: true, // a tool makes a few reads; tracking buys nothing
		Dialer:       netDialer(o.timeout),
	}
	if o.tls {
		opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.tlsServerName}
		if o.tlsCA != "" {
			pem, err := os.ReadFile(o.tlsCA)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("reading --tls-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, nil, nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", o.tlsCA)
			}
			opt.TLSConfig.RootCAs = pool
		}
	}
	rc, err := rueidis.NewClient(opt)
	if _, ok := rueidis.IsRedisErr(err); ok {
		// Reached, but refused: a wrong user or password, mostly.
		return nil, nil, nil, fmt.Errorf("redis at %s refused the connection: %w", o.addr, err)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("cannot reach Redis at %s: %w", o.addr, err)
	}
	c, err := dsync.NewClient(rc, dsync.WithKeyPrefix(o.prefix))
	if err != nil {
		rc.Close()
		return nil, nil, nil, err
	}
	return c, rc, func() { c.Close(); rc.Close() }, nil
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
func watch(ctx context.Context, c *dsync.Client, rc rueidis.Client, o options, name string, w io.Writer) error {
	t := time.NewTicker(o.interval)
	defer t.Stop()
	// With keyspace notifications on the server, a change of any key under
	// the prefix wakes the watch at once, and polling stays only as a
	// fallback for what sends no event; without them, it polls.
	changed := keyspaceEvents(ctx, rc, o.prefix)
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
		case <-changed:
		}
	}
}

// topRow is one line of top.
type topRow struct {
	Kind    string  `json:"kind"`
	Name    string  `json:"name"`
	Holders int     `json:"holders"`
	Waiters int     `json:"waiters"`
	HeldFor float64 `json:"held_for_s"` // age of the oldest hold, seconds; 0 if free
	// Waiting is how long the lock has had waiters without a break, as
	// top's refreshes saw it, seconds; 0 without waiters.
	Waiting float64 `json:"waiting_s"`
}

// ansiHome clears a terminal and moves the cursor home: top redraws its
// frame in place.
const ansiHome = "\x1b[H\x1b[2J"

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// top prints the most contended locks under the prefix, redrawn every
// --interval until interrupted.
func top(ctx context.Context, c *dsync.Client, rc rueidis.Client, o options, pattern string, w io.Writer) error {
	t := time.NewTicker(o.interval)
	defer t.Stop()
	tty := isTerminal(w) && !o.json
	since := map[[2]string]time.Time{} // when a lock's waiters were first seen, by kind and name
	for {
		rows, err := topRows(ctx, c, rc, o, pattern)
		if ctx.Err() != nil {
			return nil // interrupted: the normal end of top
		}
		if err != nil {
			return err
		}
		rows = rankTop(rows, since, time.Now(), o.all)
		if len(rows) > o.limit {
			rows = rows[:o.limit]
		}
		if o.json {
			if err := json.NewEncoder(w).Encode(rows); err != nil {
				return err
			}
		} else {
			var b strings.Builder
			if tty {
				b.WriteString(ansiHome)
			}
			fmt.Fprintf(&b, "--- %s\n%-10s %7s %7s %10s %10s  %s\n", time.Now().Format("15:04:05"), "KIND", "HOLDERS", "WAITERS", "HELD FOR", "WAITING", "NAME")
			for _, r := range rows {
				held, waiting := "-", "-"
				if r.Holders > 0 {
					held = (time.Duration(r.HeldFor * float64(time.Second))).Round(time.Millisecond).String()
				}
				if r.Waiters > 0 {
					waiting = (time.Duration(r.Waiting * float64(time.Second))).Round(time.Millisecond).String()
				}
				fmt.Fprintf(&b, "%-10s %7d %7d %10s %10s  %s\n", r.Kind, r.Holders, r.Waiters, held, waiting, quote(r.Name))
			}
			if _, err := io.WriteString(w, b.String()); err != nil {
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

// rankTop orders rows as top shows them: most waiters first, then the
// longest waited for, then the most holders, then by name; idle locks (no
// holder, no waiter) are left out unless all. since records, across
// refreshes, when each lock's waiters were first seen (now, for those seen
// first now); a lock without waiters is forgotten.
func rankTop(rows []topRow, since map[[2]string]time.Time, now time.Time, all bool) []topRow {
	seen := map[[2]string]bool{}
	out := rows[:0]
	for _, r := range rows {
		k := [2]string{r.Kind, r.Name}
		if r.Waiters > 0 {
			seen[k] = true
			if _, ok := since[k]; !ok {
				since[k] = now
			}
			r.Waiting = now.Sub(since[k]).Seconds()
		}
		if all || r.Holders > 0 || r.Waiters > 0 {
			out = append(out, r)
		}
	}
	for k := range since {
		if !seen[k] {
			delete(since, k)
		}
	}
	slices.SortStableFunc(out, func(a, b topRow) int {
		if a.Waiters != b.Waiters {
			return b.Waiters - a.Waiters
		}
		if a.Waiting != b.Waiting {
			if a.Waiting > b.Waiting {
				return -1
			}
			return 1
		}
		if a.Holders != b.Holders {
			return b.Holders - a.Holders
		}
		return strings.Compare(a.Name+a.Kind, b.Name+b.Kind)
	})
	return out
}

// topRows reads every lock matching pattern.
func topRows(ctx context.Context, c *dsync.Client, rc rueidis.Client, o options, pattern string) ([]topRow, error) {
	cctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	refs, err := c.List(cctx, pattern)
	if err != nil {
		return nil, err
	}
	now, err := rc.Do(cctx, rc.B().Time().Build()).AsStrSlice()
	if err != nil || len(now) != 2 {
		return nil, fmt.Errorf("reading the server clock: %v", err)
	}
	sec, _ := strconv.ParseUint(now[0], 10, 64)
	usec, _ := strconv.ParseUint(now[1], 10, 64)
	nowUS := sec*1_000_000 + usec
	seen := map[string]bool{}
	var rows []topRow
	for _, r := range refs {
		if seen[r.Name] {
			continue
		}
		seen[r.Name] = true
		states, err := c.Inspect(cctx, r.Name)
		if err != nil {
			return nil, err
		}
		for _, st := range states {
			row := topRow{Kind: string(st.Kind), Name: st.Name, Holders: len(st.Holders), Waiters: waiting(st)}
			for _, h := range st.Holders {
				// Tokens minted in Redis are the server clock in µs, or just
				// above the last one: its age is the hold's, near enough.
				if h.Token > 0 && h.Token <= nowUS {
					row.HeldFor = max(row.HeldFor, float64(nowUS-h.Token)/1e6)
				}
			}
			rows = append(rows, row)
		}
	}
	return rows, nil // ranked by rankTop
}

// keyspaceEvents returns a channel that receives (coalesced) when a key
// under prefix changes, if the server sends keyspace notifications
// (notify-keyspace-events with K and some event class); otherwise nil,
// which never receives.
func keyspaceEvents(ctx context.Context, rc rueidis.Client, prefix string) <-chan struct{} {
	conf, err := rc.Do(ctx, rc.B().ConfigGet().Parameter("notify-keyspace-events").Build()).AsStrMap()
	flags := conf["notify-keyspace-events"]
	if err != nil || !strings.Contains(flags, "K") || strings.Trim(flags, "KE") == "" {
		return nil
	}
	ch := make(chan struct{}, 1)
	pattern := "__keyspace@*__:" + globQuote(prefix) + ":*"
	go func() {
		_ = rc.Receive(ctx, rc.B().Psubscribe().Pattern(pattern).Build(), func(rueidis.PubSubMessage) {
			select {
			case ch <- struct{}{}:
			default: // a wake-up is already pending
			}
		})
	}()
	return ch
}

// globQuote quotes the glob characters of s for PSUBSCRIBE.
func globQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
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
	refs, told, err := c.ForceUnlockTell(ctx, name)
	if err != nil {
		return err
	}
	if len(refs) == 0 {
		var kinds []string
		for _, s := range before {
			kinds = append(kinds, string(s.Kind))
		}
		return fmt.Errorf("%w: %s is not held (found: %s): nothing released", errNothing, quote(name), strings.Join(kinds, ", "))
	}
	if o.json {
		type toldJSON struct {
			Kind   string `json:"kind"`
			Owner  string `json:"owner"`
			Client string `json:"client"`
			Locker bool   `json:"locker"` // taken by Lock: no lock context was cancelled
		}
		tj := []toldJSON{}
		for _, h := range told {
			tj = append(tj, toldJSON{string(h.Kind), h.Owner, h.Client, h.Locker})
		}
		return json.NewEncoder(w).Encode(map[string]any{"released": toJSON(heldOnly(before, refs)), "told": tj})
	}
	for _, s := range heldOnly(before, refs) {
		if s.Kind == dsync.KindWaitGroup {
			fmt.Fprintf(w, "reset wait_group %s from counter %d to 0; its waiters were woken\n", quote(name), s.Counter)
			continue
		}
		for _, h := range s.Holders {
			what := "held"
			if s.Kind == dsync.KindSemaphore {
				what = fmt.Sprintf("%d permits held", h.Permits)
			}
			fmt.Fprintf(w, "released %s %s %s by %s (token %d); its waiters were woken; %s\n", s.Kind, quote(name), what, h.Owner, h.Token, toldNote(told, h.Owner))
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

// toldNote says whether the holder owner was told of its forced release
// at once (its Client cancelled its lock context), and by which Client.
func toldNote(told []dsync.ToldHolder, owner string) string {
	for _, t := range told {
		if t.Owner == owner && t.Locker {
			return "its holder's Client " + t.Client + " saw the release at once, but the holder took the lock with Lock, which has no lock context to cancel: nothing stops its work (its Client only logged the loss)"
		}
		if t.Owner == owner {
			return "its holder was told at once (Client " + t.Client + " cancelled its lock context)"
		}
	}
	return "its holder was not reached at once (process gone, stopped or cut off): it finds out at its next renewal, or its lease ends"
}
