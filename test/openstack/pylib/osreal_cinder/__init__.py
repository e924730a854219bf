"""OPKE's conformance cloud: Cinder's fake volume driver, able to extend.

cinder.tests.fake_driver.FakeLoggingVolumeDriver logs every call instead of
acting, but its extend_volume is LVM's, which calls an extend its fake
volume group lacks (AttributeError: the volume goes error_extending). An
extend of a volume without data is nothing to do: logged, like the rest.
"""
from cinder.tests import fake_driver
from cinder.volume import volume_utils


class FakeVolumeDriver(fake_driver.FakeLoggingVolumeDriver):
    @volume_utils.trace_method
    def extend_volume(self, volume, new_size):
        pass
