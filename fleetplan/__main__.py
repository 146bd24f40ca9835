from fleetplan.cli import main

main()
