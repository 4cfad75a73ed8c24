export INTERLUDE_FLOWS=examples.refunds          # the modules that define flows

RUN_ID=$(python docs/tutorial/start_refund.py)   # the worker runs it until it waits

# A responder of finance. Its credential is printed once, and stored only as a hash.
export INTERLUDE_ACTOR_TOKEN=$(interlude actors add ada --role finance | sed -n 's/^credential: //p')
python docs/tutorial/approve_refund.py "$RUN_ID"  # prints the question, then: accepted

interlude runs wait "$RUN_ID" --timeout 30       # exit status 0: the run succeeded
interlude interrupts list --run "$RUN_ID"        # the approval, resolved
interlude runs show "$RUN_ID"                    # the timeline: who did what, and when
