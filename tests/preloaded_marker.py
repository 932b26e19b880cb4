"""A module nothing imports but the GPU service's self-test, which has the service import
it before it forks its later children (tests/test_gpu_service.py)."""
