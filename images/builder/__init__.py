"""The parts of images/build.py: Debian packages through a private apt state (debian), layers
from packages and files (layers), the OCI archive (oci), the Dockerfiles' lint (dockerfiles)."""
