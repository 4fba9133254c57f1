# Convenience wrapper: every target calls ./dev, which needs only bash and Python 3.11.
.PHONY: help setup run test compile compile-check bench images image-test lock clean
help:
	@./dev help
setup run test compile compile-check bench images image-test lock clean:
	./dev $@
