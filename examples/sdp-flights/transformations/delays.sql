-- SQL definitions: a streaming table of late departures and a per-carrier summary.
CREATE STREAMING TABLE delayed_flights
COMMENT 'departures more than an hour late'
AS SELECT carrier, flight, origin, dest, dep_delay, arr_delay
FROM STREAM(flights_raw)
WHERE dep_delay > 60;

CREATE MATERIALIZED VIEW carrier_delays
COMMENT 'late departures per carrier'
AS SELECT carrier, count(*) AS late_flights, round(avg(dep_delay), 1) AS avg_delay
FROM delayed_flights
GROUP BY carrier;
