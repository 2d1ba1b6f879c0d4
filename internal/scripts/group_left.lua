-- The end of GroupLeave: group_leave.lua only takes the call out.
return 0
