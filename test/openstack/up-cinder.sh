# sourced by up.sh: Cinder (API, scheduler, one volume service) with Cinder's own fake backend,
# cinder.tests.fake_driver.FakeLoggingVolumeDriver (Debian's python3-cinder ships it; pylib/osreal_cinder
# gives it the no-op extend it lacks): volumes,
# snapshots, extends and attachments go through Cinder's real API, scheduler and volume manager,
# the driver only logs; Nova's fake virt driver records the attachments. No data path: what a
# volume holds is the simulator's business (its hosts), never this cloud's.
mkdir -p $S/cinder
cat >$E/cinder.conf <<EOC
[DEFAULT]
transport_url = $RABBIT
auth_strategy = keystone
osapi_volume_listen = 127.0.0.1
osapi_volume_listen_port = 8776
osapi_volume_workers = 1
state_path = $S/cinder
log_dir = $L
api_paste_config = /usr/share/cinder-common/api-paste.ini
enabled_backends = fake
my_ip = 127.0.0.1
host = cinder
[database]
connection = $DB/cinder
$(authtoken cinder)
[oslo_concurrency]
lock_path = $S/cinder/lock
[fake]
volume_driver = osreal_cinder.FakeVolumeDriver
volume_backend_name = fake
EOC
cinder-manage --config-file $E/cinder.conf db sync >>$L/cinder-manage.log 2>&1
start cinder-api cinder-api --config-file $E/cinder.conf
start cinder-scheduler cinder-scheduler --config-file $E/cinder.conf
start cinder-volume env PYTHONPATH=$SRC/pylib cinder-volume --config-file $E/cinder.conf
wait_http http://127.0.0.1:8776/
# the demo project's Block Storage quotas: Cinder's defaults, as the simulator's
openstack quota set --volumes 10 --gigabytes 1000 --snapshots 10 demo >>$L/resources-bootstrap.log 2>&1
ts "cinder up"
