"""Scale-out on a shared PostgreSQL database: each runner's lease (``lease``), taking over the
turns of a runner whose lease lapsed (``takeover``), claiming submitted turns from the app's
tables (``dispatch``), and the loop that keeps all three going (``fleet``)."""
