module github.com/dsync/dsync/goredis

go 1.25.0

replace github.com/dsync/dsync => ../

require (
	github.com/dsync/dsync v0.0.0-20261125061713-6cc27bdaffaf
	github.com/redis/go-redis/v9 v9.22.0
	github.com/redis/rueidis v1.0.79
	github.com/stretchr/testify v1.11.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
