"""edgetune: ahead-of-time deployment packager for edge boards, built on Apache TVM."""

__version__ = "0.1.0"
