module opke.dev/world/kubernetes-v1.35.1

go 1.25.0

require k8s.io/kubernetes v1.35.1

replace k8s.io/api => k8s.io/api v0.35.1

replace k8s.io/client-go => k8s.io/client-go v0.35.1

replace github.com/some/fork => github.com/other/fork v1.0.0
