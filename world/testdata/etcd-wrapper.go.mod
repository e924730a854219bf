module opke.dev/world/etcd-v3.6.5

go 1.24

require (
	go.etcd.io/etcd/server/v3 v3.6.5
	go.etcd.io/etcd/etcdctl/v3 v3.6.5
	go.etcd.io/etcd/etcdutl/v3 v3.6.5
)
