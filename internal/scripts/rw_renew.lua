-- uses: lib fair_lib rw_lib
-- Extend the lease of one hold of an rw mutex, only if that hold is still
-- this owner's (rw_renew, rw_lib.lua).
--
-- ARGV[1] "read" or "write", ARGV[2] owner, ARGV[3] token, ARGV[4] lease ms
-- Reply: 1 renewed, 0 the hold is gone.
return rw_renew(server_now(), ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]))
