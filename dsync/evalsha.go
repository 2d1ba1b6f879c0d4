package dsync

import (
	"context"

	"github.com/dsync/dsync/internal/scripts"
	"github.com/redis/rueidis"
)

// evalCmds are execs of script s (its variant for this Client: Client.lua)
// as EVALSHA commands. s must be one of the scripts package's (which know
// their SHA-1). They are pinned: rueidis recycles a command when DoMulti
// returns, and when the connection broke under it (CI of 63c820a,
// TestFaultNetworkPrimitives/sem/limit_data, 2026-12-04) its writer was
// still reading one that the next Build reused: a data race. (The cause
// found later, pinResent: a read-only command that rueidis sent again
// after the break, and then recycled; pinning these as well is harmless.)
func (c *Client) evalCmds(s *rueidis.Lua, execs []rueidis.LuaExec) rueidis.Commands {
	s = c.lua(s)
	sha, _ := scripts.SHA1(s)
	cmds := make(rueidis.Commands, len(execs))
	for i, e := range execs {
		cmds[i] = c.rc.B().Evalsha().Sha1(sha).Numkeys(int64(len(e.Keys))).Key(e.Keys...).Arg(e.Args...).Build().Pin()
	}
	return cmds
}

// evalMulti runs execs of script s in one pipeline of EVALSHA, one round
// trip (rueidis' ExecMulti sends SCRIPT LOAD before every batch: two); the
// few the server did not know the script for (a restart, a failover,
// SCRIPT FLUSH) go again through Exec, which falls back to EVAL.
func (c *Client) evalMulti(ctx context.Context, s *rueidis.Lua, execs []rueidis.LuaExec) []rueidis.RedisResult {
	res := c.rc.DoMulti(ctx, c.evalCmds(s, execs)...)
	for i, r := range res {
		if e, ok := rueidis.IsRedisErr(r.Error()); ok && e.IsNoScript() {
			res[i] = c.lua(s).Exec(ctx, c.rc, execs[i].Keys, execs[i].Args)
		}
	}
	return res
}

// execAfter runs script s (keys, args) as its Exec does, after the hold-tag
// changes *pre (if not nil: see tagger.release) in the same pipeline, so
// that they reach Redis before it without a round trip of their own. Once
// they got an answer, *pre is done and set to nil (a retry of the call
// sends s alone); without one (the connection, the context), they go
// again with the next try (applying them twice only repeats history
// entries, which count once: see blockers), or are sent after the call by
// finishTags. A change the server lacked the script for is sent again
// after s (out of order: a rare loss, after a restart or SCRIPT FLUSH).
func (c *Client) execAfter(ctx context.Context, pre **tagBatch, s *rueidis.Lua, keys, args []string) rueidis.RedisResult {
	b := *pre
	if b == nil {
		return c.lua(s).Exec(ctx, c.rc, keys, args)
	}
	cmds := append(b.cmds(), c.evalCmds(s, []rueidis.LuaExec{{Keys: keys, Args: args}})...)
	res := c.rc.DoMulti(ctx, cmds...)
	last := res[len(res)-1]
	if e, ok := rueidis.IsRedisErr(last.Error()); ok && e.IsNoScript() {
		last = c.lua(s).Exec(ctx, c.rc, keys, args)
	}
	answered := true
	for i, r := range res[:len(res)-1] {
		err := r.Error()
		if e, ok := rueidis.IsRedisErr(err); ok && e.IsNoScript() {
			c.run(ctx, scripts.Call{Script: scripts.TagSync, LuaExec: b.execs[i]})
		} else if err != nil && !isRedisErr(err) {
			answered = false
		}
	}
	if answered {
		*pre = nil
		b.done()
	}
	return last
}

// finishTags sends pre if execAfter did not (no call was made), and is done
// with it.
func (c *Client) finishTags(pre *tagBatch) {
	if pre != nil {
		ctx, cancel := context.WithTimeout(c.cleanCtx, cleanupTimeout)
		pre.send(ctx)
		cancel()
	}
}
