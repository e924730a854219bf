module k8s.io/kubernetes

go 1.25.0

require (
	github.com/spf13/cobra v1.10.0
	k8s.io/api v0.0.0
)

replace (
	k8s.io/api => ./staging/src/k8s.io/api
	k8s.io/client-go => ./staging/src/k8s.io/client-go
	github.com/some/fork => github.com/other/fork v1.0.0
)
