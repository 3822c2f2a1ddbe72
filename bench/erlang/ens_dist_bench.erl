%% The Erlang side of bench/distribution.py: the same two measurements between two Erlang nodes.
%% bench/distribution.py compiles this with erlc, starts the serving node
%%   erl -noshell -name b@127.0.0.1 -setcookie C -pa DIR -eval 'ens_dist_bench:serve()'
%% (it prints "ready" once echo and sink are registered, and runs until it is killed), then
%%   erl -noshell -name a@127.0.0.1 -setcookie C -pa DIR -eval 'ens_dist_bench:run(What, Node, N)' -s init stop
%% which prints one line: the seconds the work took (a float, best of 3).
-module(ens_dist_bench).
-export([serve/0, run/3]).

serve() ->
    register(echo, spawn(fun echo/0)),
    register(sink, spawn(fun() -> sink(0) end)),
    io:format("ready~n"),
    receive never -> ok end.

%% echo answers {ping, From} with pong; sink counts what it gets until {done, From}
echo() ->
    receive {ping, From} -> From ! pong, echo() end.

sink(Count) ->
    receive
        {done, From} -> From ! Count, sink(0);
        _ -> sink(Count + 1)
    end.

run(What, Node, N) ->
    true = net_kernel:connect_node(Node),
    work(What, Node, N div 10),  % warm-up, as the Python sides have
    Seconds = lists:min([time_it(What, Node, N) || _ <- lists:seq(1, 3)]),
    io:format("~.9f~n", [Seconds]).

time_it(What, Node, N) ->
    T0 = erlang:monotonic_time(),
    work(What, Node, N),
    erlang:convert_time_unit(erlang:monotonic_time() - T0, native, nanosecond) / 1.0e9.

work(ping_pong, Node, N) -> ping({echo, Node}, N);
work(one_way, Node, N) ->
    Sink = {sink, Node},
    send_n(Sink, N),
    Sink ! {done, self()},
    receive N -> ok end.

ping(_, 0) -> ok;
ping(Echo, N) ->
    Echo ! {ping, self()},
    receive pong -> ping(Echo, N - 1) end.

send_n(_, 0) -> ok;
send_n(Sink, N) -> Sink ! N, send_n(Sink, N - 1).
