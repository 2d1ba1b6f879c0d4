package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// Cluster is a Redis Cluster of 3 masters with one replica each, on
// loopback ports.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts six cluster-enabled servers, joins them with
// redis-cli --cluster create (3 masters, 1 replica each) and waits until
// every node reports cluster_state:ok. The caller must Stop it.
//
// A cluster that does not form is made again once, on six new servers,
// and the first attempt's error is printed to stderr: the formation is
// the fixture, not what a test tests. (make test of d76c8b4, 2026-12-06,
// idle: one node's CLUSTER NODES still lacked one replica after a
// minute; 80 formations in a row, 40 idle and 40 with both CPUs busy,
// all formed within seconds the same day.)
func StartCluster() (*Cluster, error) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, fmt.Errorf("redistest: redis-cli not installed: %w", err)
	}
	cl, err := startCluster()
	if err == nil {
		return cl, nil
	}
	fmt.Fprintf(os.Stderr, "redistest: the cluster did not form; making it again on new servers: %v\n", err)
	cl, err2 := startCluster()
	if err2 != nil {
		return nil, fmt.Errorf("redistest: the cluster did not form twice: %w (the first time: %v)", err2, err)
	}
	return cl, nil
}

// startCluster is one attempt of StartCluster.
func startCluster() (*Cluster, error) {
	nodes, err := startMany(6, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0")
	if err != nil {
		return nil, err
	}
	cl := &Cluster{Nodes: nodes}
	args := []string{"--cluster", "create"}
	for _, s := range nodes {
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		cl.Stop()
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	// A minute: with both CPUs kept busy, a new cluster once took longer
	// than 30 s to agree (make test of 7aff6ec, 2026-12-04).
	if err := cl.WaitOK(time.Minute); err != nil {
		cl.Stop()
		return nil, err
	}
	return cl, nil
}

// startMany starts n servers with the same args, concurrently.
func startMany(n int, args ...string) ([]*Server, error) {
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			servers[i], errs[i] = StartServer(args...)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, s := range servers {
			if s != nil {
				s.Stop()
			}
		}
		return nil, err
	}
	return servers, nil
}

// StartServers starts n independent servers (for RedLock). The caller must
// Stop each.
func StartServers(n int, args ...string) ([]*Server, error) { return startMany(n, args...) }

// Addrs returns the addresses of every node.
func (cl *Cluster) Addrs() []string {
	addrs := make([]string, len(cl.Nodes))
	for i, s := range cl.Nodes {
		addrs[i] = s.Addr
	}
	return addrs
}

// Stop stops every node.
func (cl *Cluster) Stop() {
	for _, s := range cl.Nodes {
		s.Stop()
	}
}

// WaitOK waits until every running node reports cluster_state:ok and agrees
// on which nodes are masters.
func (cl *Cluster) WaitOK(d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		why := "" // what is not ok yet
		for _, s := range cl.Nodes {
			if s.Pid() == 0 {
				continue
			}
			info, err := do(s.Addr, "CLUSTER", "INFO").ToString()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				why = fmt.Sprintf("%s: CLUSTER INFO %v %q", s.Addr, err, firstLine(info))
				break
			}
			// Replicas are attached after the slots are assigned; until
			// every node sees all three, a failover has no target.
			nodes, err := do(s.Addr, "CLUSTER", "NODES").ToString()
			if err != nil || countReplicas(nodes) != len(cl.Nodes)/2 {
				why = fmt.Sprintf("%s: CLUSTER NODES (%v):\n%s", s.Addr, err, nodes)
				break
			}
			// A replica counts once its initial sync is done: before, WAIT
			// and a failover to it both fail.
			repl, err := do(s.Addr, "INFO", "replication").ToString()
			if err != nil || strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") ||
				strings.Contains(repl, "role:master") && !strings.Contains(repl, "state=online") {
				why = fmt.Sprintf("%s: INFO replication (%v):\n%s", s.Addr, err, repl)
				break
			}
		}
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: cluster not ok within %v: %s", d, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func countReplicas(clusterNodes string) int {
	n := 0
	for _, line := range strings.Split(clusterNodes, "\n") {
		if f := strings.Fields(line); len(f) > 2 && strings.Contains(f[2], "slave") {
			n++
		}
	}
	return n
}

// Role returns "master" or "slave" for s, as ROLE reports it.
func Role(s *Server) (string, error) {
	vals, err := do(s.Addr, "ROLE").ToArray()
	if err != nil {
		return "", err
	}
	if len(vals) == 0 {
		return "", errors.New("redistest: empty ROLE reply")
	}
	return vals[0].ToString()
}

// ClusterNode is one line of CLUSTER NODES.
type ClusterNode struct {
	ID, Addr, MasterID string
	Master             bool
	Slots              [][2]int
}

// Topology returns the cluster as one running node sees it.
func (cl *Cluster) Topology() ([]ClusterNode, error) {
	for _, s := range cl.Nodes {
		if s.Pid() == 0 {
			continue
		}
		text, err := do(s.Addr, "CLUSTER", "NODES").ToString()
		if err != nil {
			continue
		}
		// RESP3 replies a verbatim string: "txt:" then the text.
		text = strings.TrimPrefix(text, "txt:")
		var nodes []ClusterNode
		sc := bufio.NewScanner(strings.NewReader(text))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 8 {
				continue
			}
			n := ClusterNode{ID: f[0], Addr: strings.SplitN(f[1], "@", 2)[0], MasterID: f[3],
				Master: strings.Contains(f[2], "master")}
			for _, r := range f[8:] {
				lo, hi, _ := strings.Cut(r, "-")
				a, err1 := strconv.Atoi(lo)
				b := a
				var err2 error
				if hi != "" {
					b, err2 = strconv.Atoi(hi)
				}
				if err1 == nil && err2 == nil {
					n.Slots = append(n.Slots, [2]int{a, b})
				}
			}
			nodes = append(nodes, n)
		}
		return nodes, nil
	}
	return nil, errors.New("redistest: no cluster node answered")
}

// MasterOf returns the node that serves key's slot, and a replica of it.
func (cl *Cluster) MasterOf(key string) (master, replica *Server, err error) {
	slot, err := do(cl.Nodes[0].Addr, "CLUSTER", "KEYSLOT", key).AsInt64()
	if err != nil {
		return nil, nil, err
	}
	nodes, err := cl.Topology()
	if err != nil {
		return nil, nil, err
	}
	var id string
	for _, n := range nodes {
		for _, r := range n.Slots {
			if n.Master && int(slot) >= r[0] && int(slot) <= r[1] {
				id, master = n.ID, cl.byAddr(n.Addr)
			}
		}
	}
	for _, n := range nodes {
		if id != "" && n.MasterID == id {
			replica = cl.byAddr(n.Addr)
		}
	}
	if master == nil || replica == nil {
		return nil, nil, fmt.Errorf("redistest: no master with a replica for slot %d", slot)
	}
	return master, replica, nil
}

func (cl *Cluster) byAddr(addr string) *Server {
	for _, s := range cl.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// Failover runs CLUSTER FAILOVER on replica (a coordinated manual failover:
// the old master pauses its clients until the replica has caught up) and
// waits until replica is a master and the cluster is ok.
func (cl *Cluster) Failover(replica *Server, d time.Duration) error {
	if err := do(replica.Addr, "CLUSTER", "FAILOVER").Error(); err != nil {
		return err
	}
	deadline := time.Now().Add(d)
	for {
		if role, err := Role(replica); err == nil && role == "master" {
			return cl.WaitOK(time.Until(deadline))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: %s not promoted within %v", replica.Addr, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// MigrateSlot moves the slot of key, with its keys, from its master to
// another master, the way redis-cli --cluster reshard does (SETSLOT
// IMPORTING and MIGRATING, MIGRATE, SETSLOT NODE), and waits until every
// node agrees. It returns the new owner.
func (cl *Cluster) MigrateSlot(key string, d time.Duration) (*Server, error) {
	slot, err := do(cl.Nodes[0].Addr, "CLUSTER", "KEYSLOT", key).AsInt64()
	if err != nil {
		return nil, err
	}
	src, _, err := cl.MasterOf(key)
	if err != nil {
		return nil, err
	}
	nodes, err := cl.Topology()
	if err != nil {
		return nil, err
	}
	var srcID, dstID string
	var dst *Server
	for _, n := range nodes {
		switch {
		case n.Addr == src.Addr:
			srcID = n.ID
		case n.Master && dst == nil:
			dst, dstID = cl.byAddr(n.Addr), n.ID
		}
	}
	if srcID == "" || dst == nil {
		return nil, errors.New("redistest: no second master to migrate to")
	}
	sl := strconv.FormatInt(slot, 10)
	if err := do(dst.Addr, "CLUSTER", "SETSLOT", sl, "IMPORTING", srcID).Error(); err != nil {
		return nil, err
	}
	if err := do(src.Addr, "CLUSTER", "SETSLOT", sl, "MIGRATING", dstID).Error(); err != nil {
		return nil, err
	}
	for {
		keys, err := do(src.Addr, "CLUSTER", "GETKEYSINSLOT", sl, "100").AsStrSlice()
		if err != nil {
			return nil, err
		}
		if len(keys) == 0 {
			break
		}
		args := append([]string{"MIGRATE", "127.0.0.1", strconv.Itoa(dst.Port), "", "0", "5000", "KEYS"}, keys...)
		if err := do(src.Addr, args...).Error(); err != nil {
			return nil, err
		}
	}
	// The new owner first, then the old one, then the rest (as redis-cli).
	for _, n := range append([]*Server{dst, src}, cl.Nodes...) {
		if n.Pid() == 0 {
			continue
		}
		if err := do(n.Addr, "CLUSTER", "SETSLOT", sl, "NODE", dstID).Error(); err != nil && n.Addr != src.Addr && n.Addr != dst.Addr {
			// A replica refuses SETSLOT; gossip tells it.
			continue
		} else if err != nil {
			return nil, err
		}
	}
	deadline := time.Now().Add(d)
	for {
		if m, _, err := cl.MasterOf(key); err == nil && m.Addr == dst.Addr {
			if err := cl.WaitOK(time.Until(deadline)); err != nil {
				return nil, err
			}
			return dst, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("redistest: slot %d not on %s within %v", slot, dst.Addr, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// do runs one command on addr over a short-lived standalone connection.
func do(addr string, args ...string) rueidis.RedisResult {
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true,
		ForceSingleClient: true, DisableRetry: true})
	if err != nil {
		return rueidis.NewErrorResult(err)
	}
	defer rc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return rc.Do(ctx, rc.B().Arbitrary(args...).Build())
}

// Sentinel is a master, one replica and three sentinels monitoring the
// master as MasterSet, with a quorum of 2.
type Sentinel struct {
	Master, Replica *Server
	Sentinels       []*Server
}

// MasterSet is the name the sentinels monitor.
const MasterSet = "mymaster"

// StartSentinel starts the servers and sentinels and waits until every
// sentinel knows the replica. The caller must Stop it.
func StartSentinel() (*Sentinel, error) {
	m, err := StartServer("--repl-diskless-sync-delay", "0")
	if err != nil {
		return nil, err
	}
	r, err := StartServer("--replicaof", "127.0.0.1", strconv.Itoa(m.Port), "--repl-diskless-sync-delay", "0")
	if err != nil {
		m.Stop()
		return nil, err
	}
	st := &Sentinel{Master: m, Replica: r}
	for range 3 {
		s, err := startSentinel(m.Port)
		if err != nil {
			st.Stop()
			return nil, err
		}
		st.Sentinels = append(st.Sentinels, s)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range st.Sentinels {
		for {
			reps, err := do(s.Addr, "SENTINEL", "REPLICAS", MasterSet).ToArray()
			if err == nil && len(reps) > 0 {
				break
			}
			if time.Now().After(deadline) {
				st.Stop()
				return nil, fmt.Errorf("redistest: sentinel %s did not find the replica", s.Addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return st, nil
}

// startSentinel runs redis-server --sentinel with a generated config; the
// config file must come first on the command line and be writable.
func startSentinel(masterPort int) (*Server, error) {
	dir, err := os.MkdirTemp("", "redistest-sentinel")
	if err != nil {
		return nil, err
	}
	var last error
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\n",
			port, dir, MasterSet, masterPort, MasterSet, MasterSet)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return nil, err
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, dir: dir}
		if last = s.run(conf, "--sentinel", "--loglevel", "warning"); last == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, last
}

// run starts redis-server with argv as given and waits for PING.
func (s *Server) run(argv ...string) error {
	cmd := exec.Command("redis-server", argv...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if r := do(s.Addr, "PING"); r.Error() == nil {
			break
		}
		select {
		case err := <-exited:
			return fmt.Errorf("redistest: redis-server on %s exited: %v", s.Addr, err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("redistest: redis-server did not answer PING within 10s on " + s.Addr)
		}
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	go func() { <-exited }()
	return nil
}

// Addrs returns the sentinels' addresses.
func (st *Sentinel) Addrs() []string {
	addrs := make([]string, len(st.Sentinels))
	for i, s := range st.Sentinels {
		addrs[i] = s.Addr
	}
	return addrs
}

// CurrentMaster returns the server the sentinels report as master.
func (st *Sentinel) CurrentMaster() (*Server, error) {
	vals, err := do(st.Sentinels[0].Addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterSet).AsStrSlice()
	if err != nil {
		return nil, err
	}
	if len(vals) != 2 {
		return nil, errors.New("redistest: bad GET-MASTER-ADDR-BY-NAME reply")
	}
	addr := vals[0] + ":" + vals[1]
	for _, s := range []*Server{st.Master, st.Replica} {
		if s.Addr == addr {
			return s, nil
		}
	}
	return nil, fmt.Errorf("redistest: unknown master %s", addr)
}

// Failover forces a failover (SENTINEL FAILOVER) and waits until the
// sentinels report the other server as master and it says so itself.
func (st *Sentinel) Failover(d time.Duration) (*Server, error) {
	old, err := st.CurrentMaster()
	if err != nil {
		return nil, err
	}
	next := st.Replica
	if old == st.Replica {
		next = st.Master
	}
	deadline := time.Now().Add(d)
	// A sentinel refuses with NOGOODSLAVE until it has seen the replica
	// linked to the master in a recent INFO; that is a matter of time
	// right after start-up, so ask again until it accepts.
	for {
		err := do(st.Sentinels[0].Addr, "SENTINEL", "FAILOVER", MasterSet).Error()
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "NOGOODSLAVE") || time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		cur, err := st.CurrentMaster()
		if role, rerr := Role(next); err == nil && rerr == nil && cur == next && role == "master" {
			return next, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("redistest: sentinel failover to %s not done within %v", next.Addr, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop stops the sentinels and both servers.
func (st *Sentinel) Stop() {
	for _, s := range st.Sentinels {
		s.Stop()
	}
	st.Replica.Stop()
	st.Master.Stop()
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(l)
}
