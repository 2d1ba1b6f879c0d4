package scripts

import _ "embed"

var (
	//go:embed inspect_lock.lua
	inspectLockSrc string
	//go:embed force_unlock.lua
	forceUnlockSrc string
	//go:embed inspect_other.lua
	inspectOtherSrc string
	//go:embed force_rw.lua
	forceRWSrc string
	//go:embed force_sem.lua
	forceSemSrc string
	//go:embed force_other.lua
	forceOtherSrc string
)

// Scripts behind Client.Inspect and Client.ForceUnlock. InspectLock and
// ForceUnlock read and reset the "<owner> <token> <count>" value shared by
// Mutex and FairMutex.
var (
	InspectLock = newScript(inspectLockSrc)
	ForceUnlock = newScript(forceUnlockSrc)
	// InspectOther reads the RWMutex, Semaphore, Once and WaitGroup layouts.
	InspectOther = newScript(inspectOtherSrc)
	// ForceRW, ForceSem and ForceOther release the holds of the other
	// primitives for Client.ForceUnlock.
	ForceRW    = newScript(fairLibSrc + rwLibSrc + forceRWSrc)
	ForceSem   = newScript(semCommonSrc + forceSemSrc)
	ForceOther = newScript(forceOtherSrc)
)
